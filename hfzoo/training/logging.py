"""What a run reports: a progress bar (loss, tokens/s), a JSONL log, and TensorBoard when installed.

The JSONL log (`log.jsonl` in the output folder) is the run's record of truth: the model card, its loss
curve and the tests read it. One JSON object per line, each with an `event`:

* `start`: processes, distributed type, batch sizes, parameter count, the resolved config;
* `train`: `step`, `loss` (mean over the steps since the last record, all processes), `lr`,
  `grad_norm`, `tokens_per_s` (all processes), `tokens_seen`, `elapsed` (training seconds);
* `eval`: `step`, `eval_loss`, `perplexity`;
* `checkpoint`: `step`, `path`;
* `end`: `step`, final metrics, and a checksum of the weights on each process.

Only the main process writes. When a run resumes from step N, records after N (written by the
interrupted run after its last checkpoint) are dropped, so the log reads as one uninterrupted run.
"""

from __future__ import annotations

import json
import logging
import os
import statistics
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TypeVar

from tqdm.auto import tqdm

from ..core.files import write_atomic
from ..core.recipe_config import parse_config
from ..core.refusals import refusing, take_debug_switch

logger = logging.getLogger(__name__)
Config = TypeVar("Config")

LOG_FILE = "log.jsonl"


def read_log(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The records of a JSONL log (a folder means its `log.jsonl`)."""
    path = Path(path)
    if path.is_dir():
        path = path / LOG_FILE
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def steps_filling(minutes: float, calibration: str | os.PathLike) -> int:
    """The training steps that fill `minutes` at the median tokens/s a short calibration run logged (at least 10):
    a run given a wall budget on a device whose speed is measured, not guessed, and whose schedule still spans it."""
    records = read_log(calibration)
    start = next(r for r in records if r["event"] == "start")
    speed = statistics.median(r["tokens_per_s"] for r in records if r["event"] == "train")
    return max(10, int(minutes * 60 * speed / start["tokens_per_step"]))


def _truncate_after(path: Path, step: int) -> None:
    """Keep the records up to `step` (a crash can leave a half-written last line: dropped too)."""
    kept = []
    for line in path.read_text(encoding="utf-8").splitlines():
        try:
            record = json.loads(line)
        except json.JSONDecodeError:
            continue
        if record.get("step", 0) <= step and record.get("event") != "end":
            kept.append(line + "\n")
    write_atomic(path, "".join(kept))


def _tensorboard_writer(log_dir: Path, purge_step: int | None):
    try:
        from torch.utils.tensorboard import SummaryWriter
    except ImportError:
        logger.warning("tensorboard is not installed; logging to %s only", LOG_FILE)
        return None
    return SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)


class RunLogger:
    """Progress bar + JSONL + TensorBoard for the main process; a silent no-op elsewhere."""

    def __init__(
        self,
        output_dir: str | os.PathLike,
        *,
        enabled: bool,
        max_steps: int,
        start_step: int = 0,
        elapsed: float = 0.0,
        tensorboard: bool = True,
        description: str = "pretrain",
    ):
        self.enabled = enabled
        self.path = Path(output_dir) / LOG_FILE
        self._elapsed_before = elapsed
        self._started = time.perf_counter()
        self.bar = None
        self.tensorboard = None
        if not enabled:
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        if start_step and self.path.exists():
            _truncate_after(self.path, start_step)
        elif not start_step:
            write_atomic(self.path, "")
        if tensorboard:
            self.tensorboard = _tensorboard_writer(
                Path(output_dir) / "tensorboard", start_step + 1 if start_step else None
            )
        self.bar = tqdm(total=max_steps, initial=start_step, desc=description, dynamic_ncols=True)

    @property
    def elapsed(self) -> float:
        """Seconds of this run so far, including the time before a resume."""
        return self._elapsed_before + time.perf_counter() - self._started

    def write(self, event: str, **fields: Any) -> None:
        if not self.enabled:
            return
        record = {"event": event, **fields}
        with self.path.open("a", encoding="utf-8") as f:
            f.write(json.dumps(record) + "\n")
        if self.tensorboard is not None and "step" in fields:
            for key, value in fields.items():
                if key != "step" and isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.tensorboard.add_scalar(f"{event}/{key}", value, fields["step"])

    def train(
        self, step: int, loss: float, lr: float, grad_norm: float | None, tokens_per_s: float, tokens_seen: int
    ) -> None:
        self.write(
            "train",
            step=step,
            loss=loss,
            lr=lr,
            grad_norm=grad_norm,
            tokens_per_s=tokens_per_s,
            tokens_seen=tokens_seen,
            elapsed=round(self.elapsed, 3),
        )
        if self.bar is not None:
            self.bar.set_postfix(loss=f"{loss:.4f}", tok_s=f"{tokens_per_s:,.0f}", refresh=False)

    def advance(self, steps: int = 1) -> None:
        if self.bar is not None:
            self.bar.update(steps)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
        if self.tensorboard is not None:
            self.tensorboard.close()


def start_recipe(config_class: type[Config], argv: Sequence[str] | None, command: str) -> Config:
    """What every recipe's `main` does first: hfzoo's progress messages on, and the config parsed from `argv`. A bad
    config (or a missing file it names) exits with one line saying what is wrong, prefixed by `command`, not a
    parser traceback (`hfzoo.core.refusals`)."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("hfzoo").setLevel(logging.INFO)
    argv = take_debug_switch(argv)
    with refusing(command):
        return parse_config(config_class, argv, command)
