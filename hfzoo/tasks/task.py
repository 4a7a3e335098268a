"""What every task shares: the `Task` interface the recipes call, the registry of tasks, model families, GPT-style
input formatting, padding and loading the train/validation examples.

A task turns examples into features (token ids + targets), features into batches, and the model's outputs back
into predictions and metrics. How the input is laid out depends on the model's family, as in the papers:

* decoder (GPT): `bos a delim b eos`; the head reads the last token (`gpt_input_ids`);
* encoder (BERT): `[CLS] a [SEP] b [SEP]` with token types 0/1: the tokenizer's own pair template;
* encoder-decoder (T5): text to text, a task prefix in front and words as targets, scored by generation.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
from peft import TaskType
from torch import nn
from transformers import PretrainedConfig, PreTrainedTokenizerBase
from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES

from ..core.presets import FAMILY_CONFIGS
from .records import DataError, data_files, hold_out, hub_records

if TYPE_CHECKING:
    from .options import TaskOptions

FAMILIES = tuple(FAMILY_CONFIGS)
_HFZOO_FAMILIES = {config_cls.model_type: family for family, config_cls in FAMILY_CONFIGS.items()}
# Batch keys a model takes; features may carry more (offsets, word ids, example indices) for post-processing.
MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids", "labels", "start_positions", "end_positions")


def model_family(config: PretrainedConfig) -> str:
    """decoder | encoder | encoder_decoder, for hfzoo configs and native ones.

    A native model is a decoder if transformers has a causal LM for it but no masked LM (GPT-2, Llama); BERT and
    RoBERTa have both and are encoders.
    """
    if config.model_type in _HFZOO_FAMILIES:
        return _HFZOO_FAMILIES[config.model_type]
    if getattr(config, "is_encoder_decoder", False):
        return "encoder_decoder"
    causal, masked = MODEL_FOR_CAUSAL_LM_MAPPING_NAMES, MODEL_FOR_MASKED_LM_MAPPING_NAMES
    if config.model_type in causal and config.model_type not in masked:
        return "decoder"
    return "encoder"


def gpt_input_ids(
    tokenizer: PreTrainedTokenizerBase, texts: Sequence[str], max_length: int, end: bool = True
) -> tuple[list[int], list[int]]:
    """GPT's input transformation: `bos a delim b ... eos` (Radford et al., 2018, figure 1), and where each text starts.

    GPT learned new start/delimiter/extract tokens; here the tokenizer's own ones serve: bos to start, `sep` (or eos
    when there is none) between texts, eos to end, so no embedding has to be added and a frozen base works
    unchanged. The texts are truncated longest first to fit `max_length`. `end=False` leaves the final eos out
    (a prompt that a generated target continues).
    """
    pieces = [tokenizer(t, add_special_tokens=False)["input_ids"] for t in texts]
    delimiter = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    start = [tokenizer.bos_token_id] if tokenizer.bos_token_id is not None else []
    specials = len(start) + (len(pieces) - 1) + int(end)
    if max_length <= specials + len(pieces):
        raise ValueError(f"max_length={max_length} is too short for {len(pieces)} texts and {specials} special tokens")
    while sum(map(len, pieces)) > max_length - specials:
        longest = max(range(len(pieces)), key=lambda i: len(pieces[i]))
        pieces[longest] = pieces[longest][:-1]
    ids, starts = list(start), []
    for i, piece in enumerate(pieces):
        if i:
            ids.append(delimiter)
        starts.append(len(ids))
        ids.extend(piece)
    if end:
        ids.append(tokenizer.eos_token_id)
    return ids, starts


def natural_sort_key(label: str) -> tuple:
    """Sort "2" before "10" and numbers before words, so label ids follow the data's own numbering."""
    return tuple((0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", label) if part)


def pad_features(features: Sequence[dict], pad_token_id: int, side: str = "right") -> dict[str, torch.Tensor]:
    """A batch of `MODEL_INPUTS` tensors: lists padded (ids with `pad_token_id`, labels with -100), scalars stacked."""
    batch = {}
    for key in MODEL_INPUTS:
        if key not in features[0]:
            continue
        values = [f[key] for f in features]
        if not isinstance(values[0], list):
            batch[key] = torch.tensor(values)
            continue
        width = max(map(len, values))
        fill = {"labels": -100, "input_ids": pad_token_id}.get(key, 0)
        rows = [[fill] * (width - len(v)) + v if side == "left" else v + [fill] * (width - len(v)) for v in values]
        batch[key] = torch.tensor(rows)
    return batch


TASK_CLASSES: dict[str, type[Task]] = {}  # task name -> class; every `Task` subclass with a name registers itself


class Task:
    """One task. The recipes call, in order: `read`/`from_records` (examples), `fit_labels`, `model_kwargs` and
    `auto_class` (the model), `bind` (tokenizer), `encode`, `collate`, `predict_batch`, `finish`.

    Defining a subclass with a `name` registers it in `TASK_CLASSES`, which is what the `task` config key accepts:
    a new task is one new module imported by `hfzoo.tasks`.
    """

    name: str = ""
    pipeline_tag: str = ""
    suffixes: tuple[str, ...] = ()  # data-file suffixes this task reads
    auto_classes: dict[str, type] = {}  # family -> Auto class
    peft_task_types: dict[str, TaskType] = {}  # family -> PEFT task type
    trains_head: bool = True  # a new head on top of the pretrained model (classification, QA), saved with adapters

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.name:
            TASK_CLASSES[cls.name] = cls

    def __init__(self, config: TaskOptions):
        self.config = config
        self.tokenizer: PreTrainedTokenizerBase | None = None
        self.family = ""

    # --- Data.
    def read(self, path: str) -> list:
        raise NotImplementedError

    def from_records(self, records: list) -> list:
        raise NotImplementedError

    def group(self, example: Any) -> Any:
        """Examples that must stay in the same split when `validation_split` holds some out (default: none)."""
        return example.where

    def training_texts(self, examples: list) -> Iterator[str]:
        """Every text of `examples` the model reads or writes, to train a tokenizer on (`train_tokenizer`)."""
        raise ValueError(f"config key 'train_tokenizer': task {self.name!r} cannot train a tokenizer on its examples")

    def fit_labels(self, train: list, validation: list) -> None:
        """Learn the label set from `train`; a validation label not seen in training is an error."""

    # --- Model.
    def check_family(self, family: str) -> None:
        if family not in self.auto_classes:
            raise ValueError(
                f"task {self.name!r} has no {family} formulation; it runs on {' and '.join(self.auto_classes)} models"
            )

    def auto_class(self, family: str) -> type:
        self.check_family(family)
        return self.auto_classes[family]

    def model_kwargs(self, family: str) -> dict[str, Any]:
        """Extra `from_pretrained` arguments (label count and names for classification heads)."""
        return {}

    def bind(self, tokenizer: PreTrainedTokenizerBase, family: str) -> None:
        self.tokenizer, self.family = tokenizer, family

    # --- Features, batches, predictions.
    def encode(self, examples: list, training: bool) -> list[dict]:
        raise NotImplementedError

    def collate(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        return pad_features(features, self.tokenizer.pad_token_id)

    def predict_batch(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> list:
        """One output per feature of `batch` (python objects, so any process can send them to the main one)."""
        raise NotImplementedError

    def finish(self, examples: list, features: list[dict], outputs: list) -> tuple[dict[str, float], list[dict]]:
        """(metrics, one prediction record per validation example) from every feature's output."""
        raise NotImplementedError


def _read_file(task: Task, path: str) -> list:
    """The examples of one data file; a file that holds none (a header row alone) is named, not counted as 0."""
    examples = task.read(path)
    if not examples:
        raise DataError(f"{path}: no examples in the file (a header row alone, or blank lines)")
    return examples


def load_examples(task: Task, config: TaskOptions) -> tuple[list, list]:
    """(train, validation) examples: from files, a dataset folder or the Hub; limited by max_*_samples."""
    if config.dataset is not None and not Path(config.dataset).exists():
        records = hub_records(config.dataset, config.dataset_config, "train")
        if records is None:
            raise DataError(f"{config.dataset}: the Hub dataset has no train split")
        train = task.from_records(records)
        held = hub_records(config.dataset, config.dataset_config, "validation")
        validation = task.from_records(held) if held is not None else None
    else:
        files = data_files(config, task.suffixes)
        train = _read_file(task, files["train"])
        validation = _read_file(task, files["validation"]) if files["validation"] is not None else None
    if validation is None:
        if config.validation_split is None:
            raise DataError("no validation file: give --validation_file, or --validation_split to hold part of it out")
        train, validation = hold_out(train, config.validation_split, task.group)
    if config.max_train_samples is not None and config.train_subset_seed is not None:
        kept = random.Random(config.train_subset_seed).sample(range(len(train)), min(config.max_train_samples, len(train)))
        train = [train[index] for index in sorted(kept)]
    elif config.max_train_samples is not None:
        train = train[: config.max_train_samples]
    if config.max_eval_samples is not None:
        validation = validation[: config.max_eval_samples]
    if not train or not validation:
        raise DataError(f"no examples left: {len(train)} for training, {len(validation)} for validation")
    return train, validation
