"""Recipe configs: a dataclass of typed keys, read from a YAML file plus command-line overrides, checked up front.

`parse_config(PretrainConfig, ["--config", "run.yaml", "--max_steps", "50", "--model.hidden_dropout", "0"])` reads
the file, then applies each `--key value` (or `--key=value`; a bare `--flag` means true; `--a.b v` sets one entry of
a mapping key). Every mistake is reported before anything expensive starts, naming the key, the value and what is
valid: a typo in a key of a 10-minute run should cost a second, not the run.

A config class is a dataclass whose fields are made with `key` (default, help, and the checks types cannot say:
`required`, `minimum`, `choices`, `parse`), and may hold sub-configs made with `section` (`config.ulmfit`,
`config.checkpoints`): dataclasses of keys that a recipe shares with another. A key keeps its one name on the command
line and in YAML files wherever it lives (`--lr_schedule`, or `--ulmfit.lr_schedule`; a YAML file may also group keys
under their section, `ulmfit: {lr_schedule: ...}`), so key names are unique across a config's sections, and
`config_dict` saves a config flat, as it is written. Each class checks its own keys in a `check` method; `validate`
runs the sections' checks, then the config's own (which sees every section).
"""

from __future__ import annotations

import copy
import dataclasses
import inspect
import re
import sys
import types
import typing
from collections.abc import Callable, Collection, Sequence
from dataclasses import field
from pathlib import Path
from typing import Any, TypeVar

import yaml

from .recorded_paths import config_paths
from .refusals import did_you_mean

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


def section(config_class: type, help: str) -> Any:
    """A sub-config of a recipe's config: `config_class`'s keys, read and checked with the config's own."""
    return field(default_factory=config_class, metadata={"help": help, "section": True})


def config_sections(config_class: type) -> dict[str, type]:
    """{name: dataclass} of a config class's sub-configs (its fields made with `section`)."""
    hints = typing.get_type_hints(config_class)
    return {f.name: hints[f.name] for f in dataclasses.fields(config_class) if f.metadata.get("section")}


def _own_fields(config_class: type) -> dict[str, dataclasses.Field]:
    fields = {f.name: f for f in dataclasses.fields(config_class) if not f.metadata.get("section")}
    own = [name for name in inspect.get_annotations(config_class) if name in fields]
    return {name: fields[name] for name in [*own, *(name for name in fields if name not in own)]}


def key_sections(config_class: type) -> dict[str, str | None]:
    """{key: the section holding it, None for the config's own keys}, in `config_fields` order."""
    owners: dict[str, str | None] = dict.fromkeys(_own_fields(config_class))
    for name, part in config_sections(config_class).items():
        for key_name in _own_fields(part):
            if key_name in owners or key_name in config_sections(config_class):
                raise TypeError(f"{config_class.__name__}: key {key_name!r} of section {name!r} is not unique")
            owners[key_name] = name
    return owners


def config_fields(config_class: type) -> dict[str, dataclasses.Field]:
    """{key: field} of a config class, its sections' keys included: its own keys first (what makes this recipe what
    it is), then its parts'."""
    owners = key_sections(config_class)
    fields = {**{n: _own_fields(c) for n, c in config_sections(config_class).items()}, None: _own_fields(config_class)}
    return {name: fields[owner][name] for name, owner in owners.items()}


def _key_hints(config_class: type) -> dict[str, Any]:
    hints = {name: typing.get_type_hints(part) for name, part in config_sections(config_class).items()}
    own = typing.get_type_hints(config_class)
    return {name: (own if owner is None else hints[owner])[name] for name, owner in key_sections(config_class).items()}


def _value(config: Any, name: str, owner: str | None) -> Any:
    return getattr(config if owner is None else getattr(config, owner), name)


def config_dict(config: Any) -> dict[str, Any]:
    """Every key of a config, flat (`{key: value}`, its sections' keys too), as it is written and saved in a run's
    output folder and its log, paths as the user gave them or could have, never a path of the machine
    (`config_paths`); `from_dict` reads it back."""
    return {name: config_paths(copy.deepcopy(_value(config, name, owner)))
            for name, owner in key_sections(type(config)).items()}  # fmt: skip


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
    hint = did_you_mean(name, [*fields, *config_sections(config_class)])
    return ValueError(f"unknown config key {name!r}.{hint} Valid keys: {', '.join(fields)}.")


def coerce_values(config_class: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with every key checked against `config_class`'s fields and every value converted to its type; keys
    grouped under their section (`ulmfit: {lr_schedule: ...}`) are read as the flat keys they are."""
    fields, hints = config_fields(config_class), _key_hints(config_class)
    coerced = {}
    for name, value in _ungrouped(config_class, values).items():
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


def _ungrouped(config_class: type, values: dict[str, Any]) -> dict[str, Any]:
    """`values` with each section's mapping (`ulmfit: {...}`) spread into flat keys, which must be that section's."""
    sections, owners, flat = config_sections(config_class), key_sections(config_class), {}
    for name, value in values.items():
        if name not in sections:
            flat[name] = value
            continue
        if not isinstance(value, dict):
            raise ValueError(f"config key {name!r} is a section: give it a mapping of its keys, or give them flat.")
        for entry, entry_value in value.items():
            if owners.get(entry) != name:
                keys = ", ".join(k for k, owner in owners.items() if owner == name)
                raise ValueError(f"config section {name!r} has no key {entry!r}. Its keys: {keys}.")
            if entry in values:
                raise ValueError(f"config key {entry!r} is given twice: flat and in section {name!r}.")
            flat[entry] = entry_value
    return flat


def validate(config: Any) -> None:
    """The checks of every key (required, minimum, choices), then each section's own `check`, then the config's
    (each part's, base parts first)."""
    owners = key_sections(type(config))
    for name, f in config_fields(type(config)).items():
        value = _value(config, name, owners[name])
        if f.metadata["required"] and not value:
            raise ValueError(f"config key {name!r} is required (give it in the YAML file or as --{name}).")
        if f.metadata["minimum"] is not None and value is not None and value < f.metadata["minimum"]:
            raise ValueError(f"config key {name!r} must be >= {f.metadata['minimum']}, got {value}.")
        choices = _choices(f)
        if choices is not None and value is not None and value not in choices:
            raise ValueError(
                f"config key {name!r}: unknown value {value!r}. Valid {f.metadata['noun']}: {', '.join(choices)}."
            )
    for checked in [*(getattr(config, name) for name in config_sections(type(config))), config]:
        for part in reversed(type(checked).__mro__):
            if "check" in vars(part):
                vars(part)["check"](checked)


def from_dict(config_class: type[Config], values: dict[str, Any]) -> Config:
    """A checked config from a mapping (a YAML file's content, with overrides applied)."""
    values, owners = coerce_values(config_class, values), key_sections(config_class)
    sections = {
        name: part(**{key_name: value for key_name, value in values.items() if owners[key_name] == name})
        for name, part in config_sections(config_class).items()
    }
    config = config_class(**{name: value for name, value in values.items() if owners[name] is None}, **sections)
    validate(config)
    return config


def read_yaml(text: str, where: str) -> Any:
    """`text` read as plain YAML data, or a ValueError in one line naming `where` (a file, a `--key`): a syntax error
    with its line and column, or a tag that would build an object (`!!python/object/apply:...`), which `safe_load`
    never runs but would refuse in a multi-line message."""
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as error:
        tag = re.search(r"for the tag '([^']*)'", str(getattr(error, "problem", "")))
        if tag is None:
            raise ValueError(f"{where}: not valid YAML ({_yaml_problem(error)})") from None
        name = tag.group(1).replace("tag:yaml.org,2002:", "!!")
        raise ValueError(f"{where}: YAML tag {name!r} is not allowed: a config holds plain values (strings, numbers, "
                         "lists, mappings), never objects, and hfzoo runs no code from it") from None


def _yaml_problem(error: yaml.YAMLError) -> str:
    """What PyYAML found wrong and where, on one line (its own message quotes the text with a caret under it)."""
    problem = getattr(error, "problem", None) or str(error).splitlines()[0]
    mark = getattr(error, "problem_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else problem


def _parse_value(raw: str, name: str) -> Any:
    return read_yaml(raw, f"--{name}") if raw.strip() else raw


def _command_line_value(raw: str, name: str, hint: Any) -> Any:
    """A key's value from the command line: text keys take it as given; `none` is None for a key that may be none
    and is no text (the keys' help says `none = ...`; YAML itself spells it null); anything else is read as YAML."""
    if hint in (str, str | None):
        return raw
    if raw.strip().lower() == "none" and type(None) in typing.get_args(hint):
        return None
    return _parse_value(raw, name)


def parse_overrides(argv: Sequence[str], config_class: type) -> tuple[str | None, dict[str, Any]]:
    """(--config path, {key: value}) from `--key value`, `--key=value`, `--flag` and `--a.b value` tokens (`a` a
    mapping key, or a section: `--ulmfit.lr_schedule` is `--lr_schedule`)."""
    fields, hints, owners = config_fields(config_class), _key_hints(config_class), key_sections(config_class)
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
        if name in config_sections(config_class) and not entry:  # a mapping of the section's keys
            values[name] = _parse_value(raw, name)
            continue
        if name in config_sections(config_class):  # --section.key (or --section.key.entry of a mapping key)
            section_key, _, entry = entry.partition(".")
            if owners.get(section_key) != name:
                raise ValueError(f"config section {name!r} has no key {section_key!r}: --{name}.<key> takes one of "
                                 f"{', '.join(k for k, owner in owners.items() if owner == name)}.")  # fmt: skip
            name = section_key
        if name not in fields:
            raise unknown_key(name, config_class)
        if entry:
            if not isinstance(values.setdefault(name, {}), dict):
                raise ValueError(f"config key {name!r} is not a mapping; cannot set {name}.{entry}.")
            values[name][entry] = _parse_value(raw, f"{name}.{entry}")
        else:
            values[name] = _command_line_value(raw, name, hints[name])
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
    values = read_yaml(Path(path).read_text(encoding="utf-8"), str(path)) or {}
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
    owners, shown = key_sections(config_class), None
    sections = {part.name: part.metadata["help"] for part in dataclasses.fields(config_class)}
    for name, f in config_fields(config_class).items():
        if owners[name] != shown:  # a section's keys under its name (also accepted as --section.key)
            shown = owners[name]
            lines.append(f"{shown}: {sections[shown]} (--{shown}.<key> or --<key>)")
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
    overrides = _ungrouped(config_class, overrides)
    required = [name for name, f in config_fields(config_class).items() if f.metadata["required"]]
    if not config_file and not set(required) <= overrides.keys():
        raise ValueError(f"give --config FILE, or at least {' and '.join(f'--{name}' for name in required)}.")
    values = _ungrouped(config_class, load_yaml(config_file) if config_file else {})
    return from_dict(config_class, apply_overrides(values, overrides))
