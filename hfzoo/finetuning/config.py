"""The fine-tuning configuration: the pretraining recipe's YAML + `--key value` syntax, with fine-tuning's keys.

`parse_args(["--model", "runs/bert-small", "--task", "sequence-classification", "--dataset", "../shared/data/sst2",
"--text_column", "sentence"])` needs no `--config` file: `model`, `task` and a data source are enough. Every
mistake (an unknown key, a bad value, a method that does not exist) is reported before a model is loaded.
"""

from __future__ import annotations

import dataclasses
import sys
import typing
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ..training.config import MIXED_PRECISION, _key, _overrides, apply_overrides, coerce_values, load_yaml, usage

TASKS = ("sequence-classification", "token-classification", "question-answering", "seq2seq")
METHODS = ("full", "lora", "ia3", "prefix", "bottleneck")
# Learning rates when none is given: full fine-tuning moves pretrained weights (BERT: 2e-5 to 5e-5); adapters start
# from zero or near-identity and need larger steps (LoRA, IA3, prefix and bottleneck papers: 1e-4 to 1e-2).
DEFAULT_LEARNING_RATES = {"full": 5e-5, "lora": 5e-4, "ia3": 3e-3, "prefix": 1e-2, "bottleneck": 1e-3}


@dataclass
class FinetuneConfig:
    """Every setting of a fine-tuning run. YAML keys and command-line flags have exactly these names."""

    # What to fine-tune, on what.
    model: str = _key("", "an hfzoo checkpoint folder, any local transformers folder, or a Hub model name")
    tokenizer: str | None = _key(None, "tokenizer path or name; none = the model's")
    task: str = _key("", " | ".join(TASKS))
    trust_remote_code: bool = _key(False, "let transformers run modeling code saved with a checkpoint")
    from_scratch: bool = _key(
        False, "full fine-tuning of the same architecture from random weights: the baseline that shows what "
        "pretraining is worth"
    )
    # Data.
    dataset: str | None = _key(None, "a local folder with train/validation (dev, valid, val) files, or a Hub name")
    dataset_config: str | None = _key(None, "the Hub dataset's configuration name, e.g. sst2 for glue")
    train_file: str | None = _key(None, "training file: csv/tsv/jsonl; CoNLL text; SQuAD json; parallel text")
    validation_file: str | None = _key(None, "validation file, same formats")
    validation_split: float | None = _key(None, "hold out this fraction of train when there is no validation file")
    text_column: str | None = _key(None, "input text column (seq2seq: source; parallel text: its file suffix)")
    text_pair_column: str | None = _key(None, "second text column of sentence-pair tasks (RTE, MNLI)")
    label_column: str | None = _key(None, "label column (token-classification jsonl: the tag-list column)")
    target_column: str | None = _key(None, "seq2seq target column (parallel text: its file suffix)")
    max_train_samples: int | None = _key(None, "keep only the first N training examples")
    max_eval_samples: int | None = _key(None, "keep only the first N validation examples")
    # Formatting.
    max_length: int = _key(128, "tokens per input (longer inputs are truncated; QA: split into windows)")
    max_target_length: int = _key(64, "tokens per target (seq2seq) and generated tokens at most")
    doc_stride: int = _key(32, "question-answering: tokens shared by consecutive context windows")
    n_best: int = _key(20, "question-answering: start/end candidates per window")
    max_answer_length: int = _key(30, "question-answering: longest answer, in tokens")
    task_prefix: str | None = _key(None, "text-to-text prefix for encoder-decoders, e.g. sst2, rte, 'translate: '")
    label_words: dict = _key({}, "text-to-text target word of each label, e.g. {0: negative, 1: positive}")
    num_beams: int = _key(1, "beams when generating (seq2seq and text-to-text evaluation)")
    # Method.
    method: str = _key("full", " | ".join(METHODS))
    peft_config: str | None = _key(None, "a PEFT config file (JSON/YAML, any method, e.g. AdaLoRA); overrides method")
    method_options: dict = _key({}, "fields of the method's PEFT config, e.g. {r: 16, lora_alpha: 32}")
    # Optimisation.
    per_device_batch_size: int = _key(16, "examples (QA: windows) per micro-batch on each process")
    eval_batch_size: int | None = _key(None, "examples per evaluation batch; none = per_device_batch_size")
    gradient_accumulation_steps: int = _key(1, "micro-batches per optimizer step")
    learning_rate: float | None = _key(None, "peak learning rate; none = the method's default")
    weight_decay: float = _key(0.01, "AdamW weight decay (not applied to biases and norms)")
    warmup_ratio: float = _key(0.06, "fraction of the steps spent in linear warmup (RoBERTa: 6%)")
    max_grad_norm: float | None = _key(1.0, "gradient clipping norm; none = no clipping")
    num_epochs: float = _key(3.0, "passes over the training set (when max_steps is not given)")
    max_steps: int | None = _key(None, "optimizer steps; overrides num_epochs")
    mixed_precision: str | None = _key(None, "no | fp16 | bf16; none = as launched (accelerate config), else no")
    cpu: bool | None = _key(None, "force CPU; none = CPU only when no accelerator is available")
    # Loop and outputs.
    log_every: int = _key(10, "optimizer steps between log records")
    eval_every: int | None = _key(None, "optimizer steps between evaluations; none = only at the end")
    tensorboard: bool = _key(False, "also log to TensorBoard (skipped if tensorboard is not installed)")
    seed: int = _key(42, "seed of the head's initialisation, the data order and dropout")
    output_dir: str = _key("runs/finetune", "where metrics, predictions, the model or adapter and the card go")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def config_fields(config_class: type[FinetuneConfig]) -> tuple[dict[str, dataclasses.Field], dict[str, Any]]:
    """({key: dataclass field}, {key: type}) of `config_class`: FinetuneConfig, or a subclass with more keys."""
    return {f.name: f for f in dataclasses.fields(config_class)}, typing.get_type_hints(config_class)


_POSITIVE = ("max_length", "max_target_length", "n_best", "max_answer_length", "num_beams", "per_device_batch_size",
             "eval_batch_size", "gradient_accumulation_steps", "max_steps", "log_every", "eval_every",
             "max_train_samples", "max_eval_samples")  # fmt: skip


def from_dict(values: dict[str, Any], config_class: type[FinetuneConfig] = FinetuneConfig) -> FinetuneConfig:
    """A checked config from a mapping (a YAML file's content, with overrides applied). A subclass (the composition
    recipe's config) checks its own keys in `__post_init__`; the fine-tuning keys are checked here."""
    config = config_class(**coerce_values(values, *config_fields(config_class)))
    validate(config)
    return config


def validate(config: FinetuneConfig) -> None:
    """Value checks that types alone cannot express; each error names the key, the value and what is valid."""
    for key in ("model", "task"):
        if not getattr(config, key):
            raise ValueError(f"config key {key!r} is required (give it in the YAML file or as --{key}).")
    if config.task not in TASKS:
        raise ValueError(f"config key 'task': unknown value {config.task!r}. Valid tasks: {', '.join(TASKS)}.")
    if config.method not in METHODS:
        raise ValueError(f"config key 'method': unknown value {config.method!r}. Valid methods: {', '.join(METHODS)}.")
    if config.from_scratch and (config.method != "full" or config.peft_config):
        raise ValueError("config key 'from_scratch': an adapter on a randomly initialised body is not a baseline; "
                         "use it with --method full.")
    if config.dataset is None and config.train_file is None:
        raise ValueError("give a data source: --dataset (a folder or a Hub name) or --train_file.")
    if config.dataset is not None and config.train_file is not None:
        raise ValueError("give --dataset or --train_file/--validation_file, not both.")
    for key in _POSITIVE:
        value = getattr(config, key)
        if value is not None and value < 1:
            raise ValueError(f"config key {key!r} must be >= 1, got {value}.")
    if config.validation_split is not None and not 0.0 < config.validation_split < 1.0:
        raise ValueError(f"config key 'validation_split' must be in (0, 1), got {config.validation_split}.")
    if config.task == "question-answering" and not 0 <= config.doc_stride < config.max_length:
        raise ValueError(f"config key 'doc_stride' must be in [0, max_length), got {config.doc_stride}.")
    if not 0.0 <= config.warmup_ratio < 1.0:
        raise ValueError(f"config key 'warmup_ratio' must be in [0, 1), got {config.warmup_ratio}.")
    if config.num_epochs <= 0:
        raise ValueError(f"config key 'num_epochs' must be > 0, got {config.num_epochs}.")
    if config.learning_rate is not None and config.learning_rate <= 0:
        raise ValueError(f"config key 'learning_rate' must be > 0, got {config.learning_rate}.")
    if config.mixed_precision is not None and config.mixed_precision not in MIXED_PRECISION:
        raise ValueError(
            f"config key 'mixed_precision' must be one of {', '.join(MIXED_PRECISION)}, got {config.mixed_precision!r}."
        )


def learning_rate(config: FinetuneConfig) -> float:
    """The configured learning rate, or the method's default (a `--peft_config` file counts as an adapter)."""
    if config.learning_rate is not None:
        return config.learning_rate
    return DEFAULT_LEARNING_RATES["lora" if config.peft_config else config.method]


def parse_args(
    argv: Sequence[str] | None = None, config_class: type[FinetuneConfig] = FinetuneConfig, command: str = "finetune"
) -> FinetuneConfig:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks."""
    argv = list(sys.argv[1:] if argv is None else argv)
    fields, types = config_fields(config_class)
    if "-h" in argv or "--help" in argv:
        print(usage(fields, command))
        raise SystemExit(0)
    config_file, overrides = _overrides(argv, fields, types)
    return from_dict(apply_overrides(load_yaml(config_file) if config_file else {}, overrides), config_class)
