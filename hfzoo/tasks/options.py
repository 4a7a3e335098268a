"""The config keys of a labelled task: which model, which task, which data, and how examples become features.

Both recipes that train on a task (fine-tuning and composition) take these keys, and the tasks read them. The
`task` key's valid values are the registered `Task` classes (`TASK_CLASSES`), so a new task needs no edit here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..core.recipe_config import key
from .task import TASK_CLASSES


@dataclass
class TaskOptions:
    """What to train, on which data, formatted how. YAML keys and command-line flags have exactly these names."""

    # What to train, on what.
    model: str = key("", "an hfzoo checkpoint folder, any local transformers folder, a Hub model name, or (from_scratch "
                     "only) a preset's name", required=True)  # fmt: skip
    tokenizer: str | None = key(None, "tokenizer path or name; none = the model's")
    task: str = key("", "the task", required=True, choices=lambda: tuple(TASK_CLASSES), choice_noun="tasks")
    trust_remote_code: bool = key(False, "let transformers run modeling code saved with a checkpoint")
    import_native: bool = key(False, "true = --model is a native transformers checkpoint (GPT-2, Llama, BERT, "
                              "RoBERTa, T5, BART): import it into hfzoo's family on the fly (hfzoo.convert."
                              "from_native), keep its tokenizer, train and save the hfzoo model")  # fmt: skip
    config_overrides: dict = key({}, "values that replace the model config's, validated as a new config is, e.g. "
                                 "'{hidden_dropout: 0.1, attention_dropout: 0.1}' for a checkpoint pretrained "
                                 "without dropout; keys as the loaded config names them (hfzoo's with "
                                 "import_native); with an adapter, only dropout")  # fmt: skip
    allow_other_base: bool = key(False, "use an adapter (--adapter, --adapters) on a base of its kind and sizes but "
                                 "with other weights or config than the one it recorded, with a warning")  # fmt: skip
    # Data.
    dataset: str | None = key(None, "a local folder with train/validation (dev, valid, val) files, or a Hub name")
    dataset_config: str | None = key(None, "the Hub dataset's configuration name, e.g. sst2 for glue")
    train_file: str | None = key(None, "training file: csv/tsv/jsonl; CoNLL text; SQuAD json; parallel text")
    validation_file: str | None = key(None, "validation file, same formats")
    validation_split: float | None = key(None, "hold out this fraction of train when there is no validation file")
    text_column: str | None = key(None, "input text column (seq2seq: source; parallel text: its file suffix)")
    text_pair_column: str | None = key(None, "second text column of sentence-pair tasks (RTE, MNLI)")
    label_column: str | None = key(None, "label column (token-classification jsonl: the tag-list column)")
    target_column: str | None = key(None, "seq2seq target column (parallel text: its file suffix)")
    max_train_samples: int | None = key(None, "keep only N training examples (the first N, unless train_subset_seed)",
                                        minimum=1)  # fmt: skip
    train_subset_seed: int | None = key(None, "with max_train_samples: keep N training examples drawn at random with "
                                        "this seed (in file order; the same subset whatever the run's seed) instead "
                                        "of the first N", minimum=0)  # fmt: skip
    max_eval_samples: int | None = key(None, "keep only the first N validation examples", minimum=1)
    # Formatting.
    max_length: int = key(128, "tokens per input (longer inputs are truncated; QA: split into windows)", minimum=1)
    max_target_length: int = key(64, "tokens per target (seq2seq) and generated tokens at most", minimum=1)
    doc_stride: int = key(32, "question-answering: tokens shared by consecutive context windows")
    n_best: int = key(20, "question-answering: start/end candidates per window", minimum=1)
    max_answer_length: int = key(30, "question-answering: longest answer, in tokens", minimum=1)
    task_prefix: str | None = key(None, "text-to-text prefix for encoder-decoders, e.g. sst2, rte, 'translate: '")
    label_words: dict = key({}, "text-to-text target word of each label, e.g. {0: negative, 1: positive}")
    num_beams: int = key(1, "beams when generating (seq2seq and text-to-text evaluation)", minimum=1)

    def check(self) -> None:
        if self.import_native and self.trust_remote_code:
            raise ValueError("config key 'import_native' imports transformers' own classes, which run no remote code: "
                             "drop trust_remote_code.")  # fmt: skip
        if self.dataset is None and self.train_file is None:
            raise ValueError("give a data source: --dataset (a folder or a Hub name) or --train_file.")
        if self.dataset is not None and self.train_file is not None:
            raise ValueError("give --dataset or --train_file/--validation_file, not both.")
        if self.train_subset_seed is not None and self.max_train_samples is None:
            raise ValueError("config key 'train_subset_seed' draws the max_train_samples examples to keep: give "
                             "--max_train_samples too.")  # fmt: skip
        if self.validation_split is not None and not 0.0 < self.validation_split < 1.0:
            raise ValueError(f"config key 'validation_split' must be in (0, 1), got {self.validation_split}.")
        if self.task == "question-answering" and not 0 <= self.doc_stride < self.max_length:
            raise ValueError(f"config key 'doc_stride' must be in [0, max_length), got {self.doc_stride}.")
