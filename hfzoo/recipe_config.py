"""Recipe configs: a dataclass of typed keys, read from a YAML file plus command-line overrides, checked up front.

`parse_config(PretrainConfig, ["--config", "run.yaml", "--max_steps", "50", "--model.hidden_dropout", "0"])` reads
the file, then applies each `--key value` (or `--key=value`; a bare `--flag` means true; `--a.b v` sets one entry of
a mapping key). Every mistake is reported before anything expensive starts, naming the key, the value and what is
valid: a typo in a key of a 10-minute run should cost a second, not the run.

A config class is a dataclass whose fields are made with `key` (default, help, and the checks types cannot say:
`required`, `minimum`, `choices`, `parse`). Recipes build theirs from shared parts by listing them as bases; a part
checks its own keys in a `check` method, and `validate` runs every part's `check` (base parts first).
"""

from __future__ import annotations

import dataclasses
import difflib
import inspect
import sys
import types
import typing
from collections.abc import Callable, Collection, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar

import yaml

MIXED_PRECISION = ("no", "fp16", "bf16")
CONFIG_FILE = "training_config.yaml"  # the resolved config, saved in a run's output folder

Config = TypeVar("Config")


def key(
    default: Any,
    help: str,
    *,
    required: bool = False,
    minimum: float | None = None,
    choices: Collection[str] | Callable[[], Collection[str]] | None = None,
    choice_noun: str = "values",
    parse: Callable[[str], Any] | None = None,
) -> Any:
    """A config key: its default, its `--help` line, and the checks its type alone cannot express.

    `choices` may be a callable, read when checking, so that a registry filled at import time can be named here;
    `parse` turns a string given for a non-string key (e.g. `a=x,b=y` for a mapping) into its value.
    """
    metadata = {"help": help, "required": required, "minimum": minimum, "choices": choices, "noun": choice_noun,
                "parse": parse}  # fmt: skip
    if isinstance(default, (dict, list)):
        return field(default_factory=lambda: type(default)(default), metadata=metadata)
    return field(default=default, metadata=metadata)


def config_fields(config_class: type) -> dict[str, dataclasses.Field]:
    """{key: field} of a config class: its own keys first (what makes this recipe what it is), then its parts'."""
    fields = {f.name: f for f in dataclasses.fields(config_class)}
    own = [name for name in inspect.get_annotations(config_class) if name in fields]
    return {name: fields[name] for name in [*own, *(name for name in fields if name not in own)]}


def _choices(f: dataclasses.Field) -> Collection[str] | None:
    choices = f.metadata["choices"]
    return choices() if callable(choices) else choices


def _type_name(hint: Any) -> str:
    if isinstance(hint, types.UnionType):
        return " or ".join(_type_name(h) for h in typing.get_args(hint))
    return "null" if hint is type(None) else getattr(hint, "__name__", str(hint))


def coerce(name: str, value: Any, hint: Any) -> Any:
    """`value` as the type `hint` wants, or a ValueError naming the key, the value and the type.

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
    raise ValueError(f"config key {name!r} must be {_type_name(hint)}, got {value!r} ({type(value).__name__}).")


def unknown_key(name: str, config_class: type) -> ValueError:
    """The error for a key `config_class` does not have: why, when it is a sibling recipe's key the class declares
    in `foreign_keys`; else the closest valid key and the list of them."""
    foreign = getattr(config_class, "foreign_keys", {})
    if name in foreign:
        return ValueError(f"config key {name!r} {foreign[name]}")
    fields = config_fields(config_class)
    close = difflib.get_close_matches(name, fields, n=1)
    hint = f" Did you mean {close[0]!r}?" if close else ""
    return ValueError(f"unknown config key {name!r}.{hint} Valid keys: {', '.join(fields)}.")


def coerce_values(config_class: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every key checked against `config_class`'s fields and every value converted to its type."""
    fields, hints = config_fields(config_class), typing.get_type_hints(config_class)
    coerced = {}
    for name, value in values.items():
        if name not in fields:
            raise unknown_key(name, config_class)
        parse = fields[name].metadata["parse"]
        if parse is not None and isinstance(value, str):
            try:
                value = parse(value)
            except ValueError as error:
                raise ValueError(f"config key {name!r}: {error}") from None
        coerced[name] = coerce(name, value, hints[name])
    return coerced


def validate(config: Any) -> None:
    """The checks of every key (required, minimum, choices), then each part's own `check`, base parts first."""
    for name, f in config_fields(type(config)).items():
        value = getattr(config, name)
        if f.metadata["required"] and not value:
            raise ValueError(f"config key {name!r} is required (give it in the YAML file or as --{name}).")
        if f.metadata["minimum"] is not None and value is not None and value < f.metadata["minimum"]:
            raise ValueError(f"config key {name!r} must be >= {f.metadata['minimum']}, got {value}.")
        choices = _choices(f)
        if choices is not None and value is not None and value not in choices:
            raise ValueError(
                f"config key {name!r}: unknown value {value!r}. Valid {f.metadata['noun']}: {', '.join(choices)}."
            )
    for part in reversed(type(config).__mro__):
        if "check" in vars(part):
            vars(part)["check"](config)


def from_dict(config_class: type[Config], values: dict[str, Any]) -> Config:
    """A checked config from a mapping (a YAML file's content, with overrides applied)."""
    config = config_class(**coerce_values(config_class, values))
    validate(config)
    return config


def _parse_value(raw: str) -> Any:
    return yaml.safe_load(raw) if raw.strip() else raw


def parse_overrides(argv: Sequence[str], config_class: type) -> tuple[str | None, dict[str, Any]]:
    """(--config path, {key: value}) from `--key value`, `--key=value`, `--flag` and `--a.b value` tokens."""
    fields, hints = config_fields(config_class), typing.get_type_hints(config_class)
    config_file, values, i = None, {}, 0
    while i < len(argv):
        token = argv[i]
        if not token.startswith("--"):
            raise ValueError(f"unexpected argument {token!r}: settings are given as --key value (see --help).")
        name, has_value, raw = token[2:].partition("=")
        if not has_value:
            has_value = i + 1 < len(argv) and not argv[i + 1].startswith("--")
            raw = argv[i + 1] if has_value else "true"
            i += has_value
        i += 1
        if name == "config":
            config_file = raw
            continue
        name, _, entry = name.partition(".")
        if name not in fields:
            raise unknown_key(name, config_class)
        if entry:
            if not isinstance(values.setdefault(name, {}), dict):
                raise ValueError(f"config key {name!r} is not a mapping; cannot set {name}.{entry}.")
            values[name][entry] = _parse_value(raw)
        else:
            values[name] = raw if hints[name] in (str, str | None) else _parse_value(raw)
    return config_file, values


def apply_overrides(values: dict[str, Any], overrides: dict[str, Any]) -> dict[str, Any]:
    """`values` (from the YAML file) with the command line's overrides; `--a.b v` sets one entry of mapping `a`."""
    for name, value in overrides.items():
        if isinstance(value, dict) and isinstance(values.get(name), dict):
            values[name] = {**values[name], **value}
        else:
            values[name] = value
    return values


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


def usage(config_class: type, command: str) -> str:
    lines = [
        f"usage: {command} [--config FILE] [--key value ...] [--debug]", "",
        "Input the run cannot use is refused in one line, exit status 2; --debug (or HFZOO_DEBUG=1) shows the "
        "traceback instead.", "", "keys (default):",
    ]  # fmt: skip
    for name, f in config_fields(config_class).items():
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        choices = _choices(f)
        help_text = f"{' | '.join(choices)}: {f.metadata['help']}" if choices else f.metadata["help"]
        lines.append(f"  --{name:<28} {help_text} ({default!r})")
    return "\n".join(lines)


def parse_config(config_class: type[Config], argv: Sequence[str] | None, command: str) -> Config:
    """The config from `argv` (default: `sys.argv[1:]`): YAML file, then overrides, then checks. `--help` prints
    every key with its default and exits."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if "-h" in argv or "--help" in argv:
        print(usage(config_class, command))
        raise SystemExit(0)
    config_file, overrides = parse_overrides(argv, config_class)
    required = [name for name, f in config_fields(config_class).items() if f.metadata["required"]]
    if not config_file and not set(required) <= overrides.keys():
        raise ValueError(f"give --config FILE, or at least {' and '.join(f'--{name}' for name in required)}.")
    return from_dict(config_class, apply_overrides(load_yaml(config_file) if config_file else {}, overrides))
