"""hfzoo's writes: atomic, and never to a file hfzoo did not write.

One set of crash guarantees for every file and folder hfzoo writes (checkpoints, the best model, compositions,
converted models and adapters, model cards, logs and metrics):

* A file is written under a temporary name in its own folder, flushed to disk (`os.fsync`), renamed over its final
  name (`os.replace`, atomic on POSIX) and its folder flushed: after a crash, even SIGKILL or a power cut, the file
  holds all of its old content or all of its new, never a part.
* A folder is built whole in a staging folder, flushed, then published. A folder that did not exist appears with one
  rename, complete or not at all. Into a folder that exists, each file moves in as above, and the folder itself is
  never removed or swapped (a shell inside it keeps working; the user's own files in it stay). Its `marker` (a
  checkpoint's manifest, a converted model's record) goes first and comes back last, so a folder caught mid-publish
  lacks it and reads as incomplete.
* Nothing else changes: only the files published, and those the previous output of the same kind listed and the new
  one lacks (a shard or a composed adapter no longer there), which are removed.

And a rule about where outputs go (`check_output_folder`): a non-empty folder that is not an earlier output of the
same command is refused, naming it, unless the user passes `--overwrite_output_dir` (transformers' name for it), and
an output may not be an input's folder, nor inside one, nor hold one (`check_output_outside_inputs`). hfzoo's own
bookkeeping in a folder (a staging leftover, the lock of the run writing there: `hfzoo.training.run_lock`) does not
count as its content (`folder_entries`).
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

# Written into the outputs of `hfzoo convert`: the command and the files it wrote (relative paths, no machine path).
OUTPUT_RECORD = "hfzoo_output.json"
STAGING_PREFIX = ".hfzoo-staging"
# The lock of the run writing into an output folder (`hfzoo.training.run_lock`); its temporary files start so too.
RUN_LOCK = ".hfzoo-run.lock"


def _fsync(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def fsync_tree(path: str | os.PathLike) -> None:
    """Flush every file and folder under `path` (and `path`) to disk, so a rename never publishes data in flight."""
    path = Path(path)
    for item in [*path.rglob("*"), path]:
        if not item.is_symlink():
            _fsync(item)


@contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """A temporary path beside `path` for a writer that takes a path (safetensors' `save_file`, pyarrow, the block
    of a `with`): when the block ends normally, the file is flushed and renamed over `path`; when it raises, the
    temporary file is removed and `path` is left as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}-{secrets.token_hex(4)}.tmp")
    try:
        yield temporary
        _fsync(temporary)
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise
    _fsync(path.parent)


def write_atomic(path: str | os.PathLike, content: str | bytes) -> Path:
    """Write `content` (text as UTF-8) to `path` atomically (`atomic_path`); returns `path`."""
    with atomic_path(path) as temporary:
        if isinstance(content, str):
            temporary.write_text(content, encoding="utf-8")
        else:
            temporary.write_bytes(content)
    return Path(path)


def staging_folder(final: str | os.PathLike) -> Path:
    """Where `final` is built before `publish_folder`: inside it when it exists (the same file system as the files it
    replaces, and no write access to its parent needed), else beside it (so it appears with one rename). The name is
    fixed, so every process of a distributed run finds the same one; the caller removes a leftover of a crash."""
    final = Path(os.path.abspath(final))
    return final / STAGING_PREFIX if final.is_dir() else final.with_name(f"{STAGING_PREFIX}-{final.name}")


def published_folder(folder: str | os.PathLike) -> Path:
    """The folder that `folder` will be published as, when it is a staging folder (`staging_folder`,
    `sibling_staging_folder`) or inside one (a composition's `adapters/<name>/`), else `folder`: what a file written
    into it must take its relative paths from."""
    folder = Path(os.path.abspath(folder))
    for staging in (folder, *folder.parents):
        if staging.name == STAGING_PREFIX:
            return staging.parent / folder.relative_to(staging)
        if staging.name.startswith(STAGING_PREFIX + "-"):
            return staging.with_name(staging.name.removeprefix(STAGING_PREFIX + "-")) / folder.relative_to(staging)
    return folder


@contextmanager
def staged(final: str | os.PathLike, command: str | None = None, marker: str | None = None,
           previous: Iterable[str] = ()) -> Iterator[Path]:  # fmt: skip
    """A fresh staging folder for `final` (one process); when the block ends normally, published as `final`: with
    `publish_output` when `command` is given, else `publish_folder`. When it raises, `final` is left as it was."""
    staging = staging_folder(final)
    if staging.exists():
        shutil.rmtree(staging)
    staging.mkdir(parents=True)
    try:
        yield staging
        if command is not None:
            publish_output(staging, final, command)
        else:
            publish_folder(staging, final, marker=marker, previous=previous)
    finally:
        if staging.exists():
            shutil.rmtree(staging)


def _files(folder: Path) -> list[str]:
    return sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file() or p.is_symlink())


def _inside(folder: Path, relative: object) -> Path | None:
    """`folder / relative` when that stays inside `folder`, symbolic links followed (a recorded name may come from a
    tampered file); else None."""
    if not isinstance(relative, str) or Path(relative).is_absolute() or ".." in Path(relative).parts:
        return None
    path, root = folder / relative, folder.resolve()
    parent = path.parent.resolve()
    return path if parent == root or root in parent.parents else None


def publish_folder(
    staging: str | os.PathLike, final: str | os.PathLike, *, marker: str | None = None, previous: Iterable[str] = ()
) -> None:
    """Publish the complete folder `staging` as `final`, with the guarantees of this module's docstring.

    `marker`: the file that says the folder is complete (removed first, moved in last). `previous`: the files of the
    output this one replaces (relative paths); those the new one lacks are removed, and nothing else is.
    """
    staging, final = Path(os.path.abspath(staging)), Path(os.path.abspath(final))
    fsync_tree(staging)
    if not final.exists():
        final.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging, final)
        _fsync(final.parent)
        return
    new = _files(staging)
    if marker is not None and (final / marker).exists():
        (final / marker).unlink()
        _fsync(final)
    folders = {final}
    for relative in sorted(new, key=lambda name: name == marker):
        target = final / relative
        target.parent.mkdir(parents=True, exist_ok=True)
        os.replace(staging / relative, target)
        folders.add(target.parent)
    for relative in set(previous) - set(new):
        old = _inside(final, relative)
        if old is not None and (old.is_file() or old.is_symlink()):
            old.unlink()
            folders.add(old.parent)
            while old.parent != final and not any(old.parent.iterdir()):  # a folder only the old output had
                old = old.parent
                old.rmdir()
                folders.add(old.parent)
    for folder in folders:
        if folder.exists():
            _fsync(folder)
    shutil.rmtree(staging)


def _retired(final: Path) -> Path:
    return final.with_name(f"{STAGING_PREFIX}-old-{final.name}")


def replace_folder(staging: str | os.PathLike, final: str | os.PathLike) -> None:
    """Publish the complete folder `staging` as `final`, a folder only hfzoo writes (a checkpoint, the best model):
    swapped whole, never changed in place, so `final` is at every moment the complete old folder or the complete new
    one. An existing `final` is first moved aside, never deleted in place; a crash between the two renames leaves it
    there for `restore_replaced`. `staging` must be a sibling of `final` (`sibling_staging_folder`)."""
    staging, final = Path(os.path.abspath(staging)), Path(os.path.abspath(final))
    fsync_tree(staging)
    retired = _retired(final)
    if final.exists():
        if retired.exists():
            shutil.rmtree(retired)
        os.replace(final, retired)
    os.replace(staging, final)
    _fsync(final.parent)
    if retired.exists():
        shutil.rmtree(retired)


def restore_replaced(final: str | os.PathLike) -> None:
    """Undo a `replace_folder` that crashed between its two renames: bring the moved-aside `final` back."""
    final = Path(os.path.abspath(final))
    if not final.exists() and _retired(final).is_dir():
        os.replace(_retired(final), final)


def sibling_staging_folder(final: str | os.PathLike) -> Path:
    """Where `replace_folder` builds `final`: beside it (a fixed name, so every process of a run finds the same)."""
    final = Path(os.path.abspath(final))
    return final.with_name(f"{STAGING_PREFIX}-{final.name}")


# ----------------------------------------------------------------------------------------------- output folders
def read_output_record(folder: str | os.PathLike) -> dict | None:
    """The record an earlier `publish_output` left in `folder` (None when there is none or it is unreadable)."""
    try:
        record = json.loads((Path(folder) / OUTPUT_RECORD).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) and isinstance(record.get("files"), list) else None


def publish_output(staging: str | os.PathLike, final: str | os.PathLike, command: str) -> None:
    """Publish `staging` as `final` (`publish_folder`) with a record of `command` and its files, which lets the next
    run of `command` into `final` replace them (and drop those it no longer writes) without `--overwrite_output_dir`."""
    staging = Path(staging)
    record = read_output_record(final)
    previous = record["files"] if record is not None and record.get("command") == command else []
    files = _files(staging)
    text = json.dumps({"command": command, "files": files}, indent=1) + "\n"
    (staging / OUTPUT_RECORD).write_text(text, encoding="utf-8")
    publish_folder(staging, final, marker=OUTPUT_RECORD, previous=previous)


def folder_entries(folder: str | os.PathLike) -> list[Path]:
    """What `folder` holds, but hfzoo's bookkeeping: a staging leftover of a crash, the lock of the run writing there
    (and its temporary files). Empty when `folder` is no folder."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if not p.name.startswith((STAGING_PREFIX, RUN_LOCK)))


def holds_other_files(folder: str | os.PathLike) -> bool:
    """Whether `folder` exists and holds anything but hfzoo's bookkeeping (`folder_entries`)."""
    return bool(folder_entries(folder))


def check_output_outside_inputs(folder: str | os.PathLike, inputs: Iterable[str | os.PathLike | None]) -> None:
    """Refuse an output `folder` that is an input's folder, inside one or holding one (`inputs`: folders or Hub names;
    names that are no folder here are skipped): writing there would replace or mix with what the run reads (a
    fine-tune's own starting model, a converted model's source). Called before anything is read or written."""
    for source in inputs:
        if not source or not Path(source).exists():
            continue
        a, b = Path(source).resolve(), Path(os.path.abspath(folder)).resolve()
        if a == b or a in b.parents or b in a.parents:
            relation = "the same folder" if a == b else "one inside the other"
            raise ValueError(f"the input {source} and the output {folder} are {relation}; write the output to a "
                             "folder outside the input.")  # fmt: skip


def check_output_folder(
    folder: str | os.PathLike,
    command: str,
    *,
    overwrite: bool,
    inputs: Iterable[str | os.PathLike | None] = (),
    reusable: bool = False,
    overwrite_flag: str | None = "--overwrite_output_dir",
) -> None:
    """Refuse, before anything is read or written, an output `folder` that is an input's folder, inside one or holding
    one (`check_output_outside_inputs`); then a `folder` that holds files unless `overwrite`, or it is `reusable`
    (the caller's own earlier output: a run to resume), or it holds the record of an earlier `command` (`hfzoo
    convert to-native`); the message suggests `overwrite_flag` (None: the command has none). The messages name the
    folders, not the command: the command line prefixes its name."""
    given = folder
    folder = Path(os.path.abspath(folder))
    check_output_outside_inputs(given, inputs)
    if folder.exists() and not folder.is_dir():
        raise FileExistsError(f"the output {given} is a file, not a folder.")
    if overwrite or reusable or not holds_other_files(folder):
        return
    record = read_output_record(folder)
    if record is not None and record.get("command") == command:
        return
    names = [p.name for p in folder_entries(folder)]
    shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    remedy = ""
    if overwrite_flag is not None:
        remedy = f", or pass {overwrite_flag} to write into it (files of other names there are kept)"
    raise FileExistsError(
        f"the output folder {given} is not empty (it holds {shown}); choose a new or empty folder{remedy}."
    )


def cache_dir() -> Path:
    """Where hfzoo caches derived data: ``$HFZOO_CACHE`` or ``~/.cache/hfzoo``."""
    return Path(os.environ.get("HFZOO_CACHE") or Path.home() / ".cache" / "hfzoo")
