"""Atomic checkpoints that resume a run exactly.

Atomic: a checkpoint is written into `checkpoints/.tmp-step-N` and published with one `os.replace` to
`checkpoints/step-N`. A crash at any moment (even SIGKILL mid-write) leaves either a complete checkpoint
or a `.tmp-*` folder, which `latest_checkpoint` never returns and the next save removes.

Exact: accelerate's `save_state` covers weights, optimizer, registered objects (the LR scheduler) and
every process's RNG states. On top of that a resumed run needs where it was in the data (`Progress`:
the epoch and the micro-batches of it already consumed, to skip them) and each process's collator
generator (masking and span noise must continue, not restart). Checkpoints are only taken right after
an optimizer step: gradients accumulated mid-step are not part of any state and would be lost.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import torch
from accelerate import Accelerator

CHECKPOINTS = "checkpoints"
PROGRESS_FILE = "progress.json"
_COMPLETE = re.compile(r"step-(\d+)")
_PARTIAL_PREFIX = ".tmp-"


@dataclass
class Progress:
    """Where a run is: the part of the training state that is not tensors."""

    step: int = 0  # optimizer steps done
    epoch: int = 0
    batches_in_epoch: int = 0  # micro-batches of `epoch` consumed, per process
    tokens_seen: int = 0  # input tokens over all processes
    elapsed: float = 0.0  # training seconds before this process started (summed over resumes)
    meter: list[float] = field(default_factory=lambda: [0.0, 0.0, 0.0])  # loss, micro-batches, tokens not yet logged


def checkpoint_dir(output_dir: str | os.PathLike, step: int) -> Path:
    return Path(output_dir) / CHECKPOINTS / f"step-{step:08d}"


def list_checkpoints(output_dir: str | os.PathLike) -> list[Path]:
    """Complete checkpoints under `output_dir`, oldest first; partial (`.tmp-*`) folders are not listed."""
    root = Path(output_dir) / CHECKPOINTS
    if not root.is_dir():
        return []
    found = [(int(m.group(1)), p) for p in root.iterdir() if p.is_dir() and (m := _COMPLETE.fullmatch(p.name))]
    return [p for _, p in sorted(found)]


def latest_checkpoint(output_dir: str | os.PathLike) -> Path | None:
    checkpoints = list_checkpoints(output_dir)
    return checkpoints[-1] if checkpoints else None


def _fsync_tree(path: Path) -> None:
    """Flush the files and the folder to disk, so the rename never publishes data still in flight."""
    for item in [*path.rglob("*"), path]:
        fd = os.open(item, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def save_checkpoint(
    accelerator: Accelerator,
    output_dir: str | os.PathLike,
    progress: Progress,
    collator_generator: torch.Generator,
    keep: int,
) -> Path:
    """Save the full training state of every process as checkpoint `progress.step`; keep the `keep` latest.

    Call it on all processes, right after an optimizer step.
    """
    final = checkpoint_dir(output_dir, progress.step)
    partial = final.with_name(_PARTIAL_PREFIX + final.name)
    if accelerator.is_main_process:
        for stale in final.parent.glob(_PARTIAL_PREFIX + "*"):  # left by a crash; never valid
            shutil.rmtree(stale)
    accelerator.wait_for_everyone()
    accelerator.save_state(partial)
    torch.save(collator_generator.get_state(), partial / f"collator_rng_{accelerator.process_index}.pt")
    if accelerator.is_main_process:
        (partial / PROGRESS_FILE).write_text(json.dumps(dataclasses.asdict(progress), indent=2))
    accelerator.wait_for_everyone()
    if accelerator.is_main_process:
        _fsync_tree(partial)
        if final.exists():  # the same step saved by an earlier run into this output_dir
            shutil.rmtree(final)
        os.replace(partial, final)
        _fsync_tree(final.parent)
        for old in list_checkpoints(output_dir)[:-keep]:
            shutil.rmtree(old)
    accelerator.wait_for_everyone()
    return final


def load_checkpoint(accelerator: Accelerator, path: str | os.PathLike, collator_generator: torch.Generator) -> Progress:
    """Restore what `save_checkpoint` saved (into the prepared model, optimizer and registered objects)."""
    path = Path(path)
    if not (path / PROGRESS_FILE).is_file():
        raise FileNotFoundError(
            f"{path} is not a complete checkpoint (no {PROGRESS_FILE}); complete ones are {CHECKPOINTS}/step-N folders"
        )
    generator_file = path / f"collator_rng_{accelerator.process_index}.pt"
    if not generator_file.is_file():
        raise FileNotFoundError(
            f"{path} has no state for process {accelerator.process_index}: it was saved by fewer processes; "
            "resume with the number of processes that saved it"
        )
    accelerator.load_state(path)
    collator_generator.set_state(torch.load(generator_file))
    return Progress(**json.loads((path / PROGRESS_FILE).read_text()))


def checkpoint_to_resume(output_dir: str | os.PathLike, resume: bool | str) -> Path | None:
    """The checkpoint a run starts from: `resume=True` takes the latest one (none: start fresh), a path that one.

    Starting fresh where checkpoints exist is an error rather than a silent overwrite of a run's history.
    """
    latest = latest_checkpoint(output_dir)
    if resume is False:
        if latest is not None:
            raise FileExistsError(
                f"{output_dir} already holds checkpoints (latest: {latest.name}); pass --resume to continue that run "
                "or choose another --output_dir"
            )
        return None
    if resume is True:
        return latest
    path = Path(resume)
    if not (path / PROGRESS_FILE).is_file():
        raise FileNotFoundError(f"resume: {path} is not a complete checkpoint (no {PROGRESS_FILE})")
    return path
