"""Labelled tasks and their data: how examples are read, laid out per model family, predicted and scored.

The recipes that train on them are `hfzoo.commands.finetune` and `hfzoo.commands.compose` (also `hfzoo finetune` and
`hfzoo compose`). Importing this package registers every task in `TASK_CLASSES`.
"""

from .options import TaskOptions
from .question_answering import QuestionAnswering
from .seq2seq import Seq2Seq
from .sequence_classification import SequenceClassification
from .task import TASK_CLASSES, Task, gpt_input_ids, load_examples, model_family, pad_features
from .token_classification import TokenClassification

__all__ = [
    "QuestionAnswering",
    "Seq2Seq",
    "SequenceClassification",
    "TASK_CLASSES",
    "Task",
    "TaskOptions",
    "TokenClassification",
    "gpt_input_ids",
    "load_examples",
    "model_family",
    "pad_features",
]
