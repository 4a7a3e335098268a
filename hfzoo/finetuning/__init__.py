"""Fine-tuning tasks: data formatting per model family, label handling, post-processing and metrics.

The recipe that uses them is `hfzoo.training.finetune` (also `recipes/finetune.py` and `hfzoo finetune`).
"""

from .config import FinetuneConfig, parse_args
from .methods import apply_method, count_parameters, head_modules, peft_config_for
from .question_answering import QuestionAnswering
from .seq2seq import Seq2Seq
from .sequence_classification import SequenceClassification
from .task import Task, gpt_input_ids, load_examples, model_family
from .token_classification import TokenClassification

TASK_CLASSES: dict[str, type[Task]] = {
    cls.name: cls for cls in (SequenceClassification, TokenClassification, QuestionAnswering, Seq2Seq)
}

__all__ = [
    "FinetuneConfig",
    "QuestionAnswering",
    "Seq2Seq",
    "SequenceClassification",
    "TASK_CLASSES",
    "Task",
    "TokenClassification",
    "apply_method",
    "count_parameters",
    "gpt_input_ids",
    "head_modules",
    "load_examples",
    "model_family",
    "parse_args",
    "peft_config_for",
]
