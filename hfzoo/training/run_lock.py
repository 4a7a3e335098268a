"""One run per output folder: the lock a training run holds on its `output_dir` while it writes there.

Two runs writing one folder interleave their logs, replace each other's checkpoints and weights mid-save, and one of
them dies with a bare `SafetensorError`; a `--resume` while the first run still writes (a killed `torchrun` leaves its
workers running) does the same. So `pretrain`, `finetune` and `compose` (a resumed run too) take the folder's lock
before they read or write anything there, and release it when they end, by error too:

* The lock is a file, `<output_dir>/.hfzoo-run.lock` (`hfzoo.core.files.RUN_LOCK`), naming the holder: its command, host,
  pid and the pid's start time. It appears whole (written under a temporary name, then hard-linked into place, which
  fails when a lock is there), so no run reads half a record.
* A second run is refused in one line naming the holder (`RunFolderLocked`, exit status 2 from the command line).
* A lock a crashed run left (SIGKILL, a power cut: nothing ran its release) does not block the folder: when its host
  is this machine and none of its processes runs any more (a zombie counts as ended, and a pid now reused by another
  program is told apart by its start time), it is stale and the new run takes it over. A lock from another host
  cannot be checked from here: it is refused, naming the host, until the user removes the file.
* A run of several processes (`torchrun`, `accelerate launch`) is one run: only its rank 0 takes the lock, naming also
  the launcher's other workers on this host, so the lock stays held while any of them still runs (a killed launcher
  leaves them running). The other ranks take none: when rank 0 is refused it exits, and the launcher stops them before
  they write (every recipe waits for all processes to have checked the folder before writing).
"""

from __future__ import annotations

import json
import os
import secrets
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..core.files import RUN_LOCK


class RunFolderLocked(FileExistsError):
    """Another run holds the output folder's lock; the message names it. A `FileExistsError`: a path the user named is
    in the way, which the command line reports in one line (`hfzoo.core.refusals`)."""


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the command name (state, parent pid, ... start time at index 19), on
    Linux; None where unknown."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2 :].split()  # the command name, in parentheses, may hold spaces


def _start_time(pid: int) -> int | None:
    """When process `pid` started, in clock ticks since boot (None where unknown): a reused pid's differs."""
    fields = _stat(pid)
    return None if fields is None else int(fields[19])


def _running(pid: int, started: int | None) -> bool:
    """Whether `pid` is a live process (not a zombie) that started at `started` (when recorded)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process: alive
        pass
    fields = _stat(pid)
    if fields is None:
        return True
    return fields[0] not in ("Z", "X") and (started is None or int(fields[19]) == started)


def _launcher_workers() -> list[int]:
    """The other workers of this process's launcher (`torchrun` starts each local rank as its child), when this is
    a multi-process run; read from /proc, so none elsewhere."""
    if int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1"))) <= 1:
        return []
    processes = Path("/proc")
    pids = [int(entry.name) for entry in processes.iterdir() if entry.name.isdigit()] if processes.is_dir() else []
    return [pid for pid in pids if pid != os.getpid() and (fields := _stat(pid)) and int(fields[1]) == os.getppid()]


def _record(command: str) -> dict:
    """What the lock says of this run: enough to name it and to tell whether it still runs."""
    processes = [os.getpid(), *_launcher_workers()]
    return {
        "command": command,
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "processes": {str(pid): _start_time(pid) for pid in processes},
        "started": time.strftime("%Y-%m-%d %H:%M:%S"),
        "token": secrets.token_hex(8),
    }


def _describe(record: dict) -> str:
    return (f"hfzoo {record.get('command', '?')}, pid {record.get('pid', '?')} on host {record.get('host', '?')}, "
            f"started {record.get('started', '?')}")  # fmt: skip


def _read(lock: Path) -> dict | None:
    """The lock's record; None when there is no lock; {} when it is not one (unreadable: refused as held)."""
    try:
        record = json.loads(lock.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError):
        return {}
    return record if isinstance(record, dict) else {}


def _stale(record: dict) -> bool:
    """Whether the run `record` names has ended: on this host, none of its processes runs."""
    if record.get("host") != socket.gethostname() or not isinstance(record.get("processes"), dict):
        return False
    try:
        return not any(_running(int(pid), started) for pid, started in record["processes"].items())
    except (TypeError, ValueError):
        return False


def _write_new(path: Path, text: str) -> None:
    """Write `text` into `path`, which must not exist yet, and flush it to disk."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    try:
        os.write(fd, text.encode("utf-8"))
        os.fsync(fd)
    finally:
        os.close(fd)


def _create(lock: Path, text: str) -> bool:
    """Create `lock` holding `text`, whole at once; False when a lock is there already."""
    temporary = lock.with_name(f"{RUN_LOCK}.{os.getpid()}-{secrets.token_hex(4)}.tmp")  # not content: see RUN_LOCK
    _write_new(temporary, text)
    try:
        os.link(temporary, lock)  # fails when `lock` exists: no two runs can both succeed
        return True
    except FileExistsError:
        return False
    except OSError:  # a file system without hard links: created exclusively, written at once after
        try:
            _write_new(lock, text)
        except FileExistsError:
            return False
        return True
    finally:
        temporary.unlink(missing_ok=True)


def _take_over(lock: Path, stale: dict) -> None:
    """Remove the stale lock `stale`, unless another run took it over meanwhile (then its lock is put back)."""
    aside = lock.with_name(f"{RUN_LOCK}.{os.getpid()}-{secrets.token_hex(4)}.stale")
    try:
        os.rename(lock, aside)
    except FileNotFoundError:  # another run removed it first
        return
    if _read(aside) != stale:  # a live lock taken in between: restore it
        try:
            os.link(aside, lock)
        except FileExistsError:
            pass
    aside.unlink(missing_ok=True)


def _refusal(folder: str | os.PathLike, lock: Path, record: dict) -> RunFolderLocked:
    if not record:
        return RunFolderLocked(f"the output folder {folder} is locked by {lock}, which names no run; remove it if no "
                               "run writes there.")  # fmt: skip
    if record.get("host") != socket.gethostname():
        return RunFolderLocked(f"the output folder {folder} is in use by {_describe(record)}, which cannot be checked "
                               f"from this host; if that run has ended, remove {lock}.")  # fmt: skip
    return RunFolderLocked(f"the output folder {folder} is in use by {_describe(record)}; wait for it to end or stop "
                           "it (one run per output folder).")  # fmt: skip


def _is_main_process() -> bool:
    """Rank 0 of a launched multi-process run, or a single process (no rank set)."""
    return int(os.environ.get("RANK", "0")) == 0


@contextmanager
def holding_run_folder(folder: str | os.PathLike, command: str) -> Iterator[None]:
    """Hold the lock of the output `folder` for the block (on rank 0; see the module's docstring): `RunFolderLocked`
    naming the run that holds it; released when the block ends, by an error too. A folder created only to hold the
    lock is removed again when the run left nothing in it (a refused run leaves no folder behind)."""
    path = Path(os.path.abspath(folder))
    if not _is_main_process() or (path.exists() and not path.is_dir()):  # a file there: the run refuses it itself
        yield
        return
    created = [parent for parent in (path, *path.parents) if not parent.exists()]
    path.mkdir(parents=True, exist_ok=True)
    lock, record = path / RUN_LOCK, _record(command)
    text = json.dumps(record, indent=1) + "\n"
    try:
        while not _create(lock, text):
            held = _read(lock)
            if held is None:  # released meanwhile
                continue
            if not _stale(held):
                raise _refusal(folder, lock, held)
            _take_over(lock, held)
    except BaseException:
        _remove_created(created)
        raise
    try:
        yield
    finally:
        if (_read(lock) or {}).get("token") == record["token"]:
            lock.unlink(missing_ok=True)
        _remove_created(created)


def _remove_created(created: list[Path]) -> None:
    """Remove the folders `holding_run_folder` created (innermost first) that are still empty."""
    for folder in created:
        try:
            folder.rmdir()
        except OSError:  # not empty (the run wrote there), or gone
            return
