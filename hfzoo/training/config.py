"""The pretraining configuration: a YAML file plus command-line overrides of any key, checked up front.

`parse_args(["--config", "recipes/configs/gpt-small-clm.yaml", "--max_steps", "50", "--model.hidden_dropout", "0"])`
reads the file, then applies each `--key value` (or `--key=value`; a bare `--flag` means true; `--a.b v` sets
one entry of a mapping key). `--config` is optional once `--preset` and `--objective` are given. Every
mistake is reported before anything expensive starts, naming the key, the value and what is valid:
a typo in a key in a 10-minute run should cost a second, not the run.
"""

from __future__ import annotations

import dataclasses
import difflib
import sys
import types
import typing
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..presets import list_presets, preset_config
from .objectives import get_objective

MIXED_PRECISION = ("no", "fp16", "bf16")
CONFIG_FILE = "training_config.yaml"  # the resolved config, saved in the output folder


def _key(default: Any, help: str) -> Any:
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata={"help": help})
    return field(default=default, metadata={"help": help})


@dataclass
class PretrainConfig:
    """Every setting of a pretraining run. YAML keys and command-line flags have exactly these names."""

    # What to train.
    preset: str = _key("", "model preset (see `hfzoo presets`), e.g. gpt-small")
    objective: str = _key("", "clm | mlm | span_corruption | denoising; must fit the preset's family")
    model: dict = _key({}, "overrides of the preset's config fields, e.g. {hidden_dropout: 0.0}")
    # Data.
    dataset: str | None = _key(None, "corpus: none = embedded default corpus; a local file/folder; or a Hub name")
    data_files: str | list | dict | None = _key(None, "local files (path, glob, list, or split -> paths)")
    text_column: str = _key("text", "column holding the text")
    max_train_samples: int | None = _key(None, "keep only the first N training texts (before packing)")
    max_eval_samples: int | None = _key(None, "keep only the first N validation texts (before packing)")
    block_size: int = _key(128, "tokens per training example; the corpus is packed into blocks of this length")
    # Tokenizer.
    tokenizer: str | None = _key(None, "tokenizer path; none = train one on the training corpus")
    tokenizer_kind: str = _key("bpe", "kind of tokenizer to train: bpe | wordpiece | unigram")
    vocab_size: int | None = _key(None, "vocabulary of the trained tokenizer; none = the preset's")
    # Objective.
    collator: dict = _key({}, "options of the objective's collator, e.g. {mlm_probability: 0.15}")
    # Optimisation.
    per_device_batch_size: int = _key(8, "blocks per micro-batch on each process")
    gradient_accumulation_steps: int = _key(1, "micro-batches per optimizer step")
    learning_rate: float = _key(3e-4, "peak learning rate of AdamW")
    weight_decay: float = _key(0.1, "AdamW weight decay (not applied to biases and norms)")
    adam_beta1: float = _key(0.9, "AdamW beta1")
    adam_beta2: float = _key(0.95, "AdamW beta2")
    adam_epsilon: float = _key(1e-8, "AdamW epsilon")
    warmup_steps: int = _key(100, "linear warmup steps")
    min_lr_ratio: float = _key(0.1, "final learning rate of the cosine decay, as a fraction of the peak")
    max_grad_norm: float | None = _key(1.0, "gradient clipping norm; none = no clipping")
    max_steps: int = _key(1000, "optimizer steps to train for")
    mixed_precision: str | None = _key(None, "no | fp16 | bf16; none = as launched (accelerate config), else no")
    cpu: bool | None = _key(None, "force CPU; none = CPU only when no accelerator is available")
    # Loop, checkpoints, logs.
    log_every: int = _key(10, "optimizer steps between log records")
    eval_every: int = _key(200, "optimizer steps between evaluations (and one at the end)")
    eval_batches: int | None = _key(None, "evaluate on at most this many batches per process; none = all")
    save_every: int = _key(500, "optimizer steps between checkpoints")
    keep_checkpoints: int = _key(2, "how many of the latest checkpoints to keep")
    tensorboard: bool = _key(True, "also log to TensorBoard (skipped if tensorboard is not installed)")
    seed: int = _key(42, "seed of the initialisation, the data order, dropout and the collator")
    output_dir: str = _key("runs/pretrain", "where checkpoints, logs and the final model go")
    resume: bool | str = _key(False, "true = continue from the latest checkpoint in output_dir; or a checkpoint path")

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


FIELDS = {f.name: f for f in dataclasses.fields(PretrainConfig)}
_TYPES = typing.get_type_hints(PretrainConfig)
_POSITIVE = (
    "block_size",
    "per_device_batch_size",
    "gradient_accumulation_steps",
    "max_steps",
    "log_every",
    "eval_every",
    "save_every",
    "keep_checkpoints",
    "max_train_samples",
    "max_eval_samples",
    "eval_batches",
    "vocab_size",
)


def _type_name(hint: Any) -> str:
    if isinstance(hint, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def _coerce(key: str, value: Any, hint: Any) -> Any:
    """`value` as the type `hint` wants, or a ValueError naming key, value and type.

    YAML reads `3e-4` as a string (YAML 1.1 floats need a dot), so numeric strings are accepted for floats.
    """
    options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    for option in options:
        if option is type(None) and value is None:
            return None
        if option is bool and isinstance(value, bool):
            return value
        if option is int and isinstance(value, int) and not isinstance(value, bool):
            return value
        if option is float and isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if option in (str, dict, list) and isinstance(value, option):
            return value
    if float in options and isinstance(value, str):
        try:
            return float(value)
        except ValueError:
            pass
    raise ValueError(f"config key {key!r} must be {_type_name(hint)}, got {value!r} ({type(value).__name__}).")


def _unknown_key(key: str, fields: dict = FIELDS) -> ValueError:
    close = difflib.get_close_matches(key, fields, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown config key {key!r}.{hint} Valid keys: {', '.join(fields)}.")


def coerce_values(values: dict[str, Any], fields: dict = FIELDS, types: dict = _TYPES) -> dict[str, Any]:
    """`values` with every key checked against a config dataclass's fields and every value converted to its type.

    `fields`/`types` default to `PretrainConfig`'s; the fine-tuning recipe passes its own config's.
    """
    unknown = [k for k in values if k not in fields]
    if unknown:
        raise _unknown_key(unknown[0], fields)
    return {k: _coerce(k, v, types[k]) for k, v in values.items()}


def from_dict(values: dict[str, Any]) -> PretrainConfig:
    """A checked config from a mapping (a YAML file's content, with overrides applied)."""
    config = PretrainConfig(**coerce_values(values))
    validate(config)
    return config


def validate(config: PretrainConfig) -> None:
    """Value checks that types alone cannot express; each error names the key, the value and what is valid."""
    for key in ("preset", "objective"):
        if not getattr(config, key):
            raise ValueError(f"config key {key!r} is required (give it in the YAML file or as --{key}).")
    if config.preset not in list_presets():
        raise ValueError(
            f"config key 'preset': unknown value {config.preset!r}. Valid presets: {', '.join(list_presets())}."
        )
    try:
        model_config = preset_config(config.preset, **config.model)
    except (ValueError, TypeError) as error:  # an unknown field or a bad value; the message says which
        raise ValueError(f"config key 'model': {error}") from None
    get_objective(config.objective, config.preset).check_collator_options(config.collator)
    for key in _POSITIVE:
        value = getattr(config, key)
        if value is not None and value < 1:
            raise ValueError(f"config key {key!r} must be >= 1, got {value}.")
    if config.warmup_steps < 0:
        raise ValueError(f"config key 'warmup_steps' must be >= 0, got {config.warmup_steps}.")
    if not 0.0 <= config.min_lr_ratio <= 1.0:
        raise ValueError(f"config key 'min_lr_ratio' must be in [0, 1], got {config.min_lr_ratio}.")
    if config.learning_rate <= 0:
        raise ValueError(f"config key 'learning_rate' must be > 0, got {config.learning_rate}.")
    if config.mixed_precision is not None and config.mixed_precision not in MIXED_PRECISION:
        raise ValueError(
            f"config key 'mixed_precision' must be one of {', '.join(MIXED_PRECISION)}, got {config.mixed_precision!r}."
        )
    if config.tokenizer_kind not in ("bpe", "wordpiece", "unigram"):
        raise ValueError(
            f"config key 'tokenizer_kind' must be bpe, wordpiece or unigram, got {config.tokenizer_kind!r}."
        )
    limit = model_config.max_position_embeddings
    if model_config.position_embedding == "learned" and config.block_size > limit:
        raise ValueError(
            f"config key 'block_size' is {config.block_size}, but preset {config.preset!r} has learned positions "
            f"for at most {limit} tokens (max_position_embeddings); use block_size <= {limit}."
        )


def _parse_value(raw: str) -> Any:
    return yaml.safe_load(raw) if raw.strip() else raw


def _overrides(argv: Sequence[str], fields: dict = FIELDS, types: dict = _TYPES) -> tuple[str | None, dict[str, Any]]:
    """(--config path, {key: value}) from `--key value`, `--key=value`, `--flag` and `--a.b value` tokens.

    `fields`/`types` describe the config dataclass (default: `PretrainConfig`; the fine-tuning recipe passes its own).
    """
    config_file, values, i = None, {}, 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise ValueError(f"unexpected argument {token!r}: settings are given as --key value (see --help).")
        key, has_value, raw = token[2:].partition("=")
        if not has_value:
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            raw = argv[i + 1] if has_value else "true"
            i += has_value
        i += 1
        if key == "config":
            config_file = raw
            continue
        name, _, entry = key.partition(".")
        if name not in fields:
            raise _unknown_key(name, fields)
        value = raw if types[name] == str | None or types[name] is str else _parse_value(raw)
        if entry:
            if not isinstance(values.setdefault(name, {}), dict):
                raise ValueError(f"config key {name!r} is not a mapping; cannot set {key!r}.")
            values[name][entry] = _parse_value(raw)
        else:
            values[name] = value
    return config_file, values


def load_yaml(path: str | Path) -> dict[str, Any]:
    text = Path(path).read_text(encoding="utf-8")
    try:
        values = yaml.safe_load(text) or {}
    except yaml.YAMLError as error:
        raise ValueError(f"{path}: not valid YAML ({error})") from None
    if not isinstance(values, dict):
        raise ValueError(
            f"{path}: a config file must be a YAML mapping of keys to values, got {type(values).__name__}."
        )
    return values


def usage(fields: dict = FIELDS, command: str = "pretrain") -> str:
    lines = [f"usage: {command} [--config FILE] [--key value ...]", "", "keys (default):"]
    for name, f in fields.items():
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        lines.append(f"  --{name:<28} {f.metadata['help']} ({default!r})")
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None = None) -> PretrainConfig:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(usage())
        raise SystemExit(0)
    config_file, overrides = _overrides(argv)
    values = load_yaml(config_file) if config_file else {}
    if not config_file and not ({"preset", "objective"} <= overrides.keys()):
        raise ValueError("give --config FILE, or at least --preset and --objective.")
    return from_dict(apply_overrides(values, overrides))


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`values` (from the YAML file) with the command line's overrides; `--a.b v` sets one entry of mapping `a`."""
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(values.get(key), dict):
            values[key] = {**values[key], **value}
        else:
            values[key] = value
    return values
