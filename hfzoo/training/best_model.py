"""Keeping the best model of a run on a labelled task (`save_best`): which validation metric ranks it and in which
direction, the record of the best evaluation so far, and the `best/` folder, replaced atomically.

The record is registered for checkpointing, so a resumed run knows the best score before its checkpoint. A resumed
run recomputes every evaluation after its checkpoint exactly (same weights, same data), so the `best/` folder an
interrupted run wrote after its last checkpoint is written again, identically; for that guarantee the keys that
change which steps are evaluated, or the weights there (`eval_every`, the run length), may not change on resume.
"""

from __future__ import annotations

import logging
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from accelerate import Accelerator

from ..core.files import publish_folder, replace_folder, restore_replaced, sibling_staging_folder, staging_folder
from .checkpointing import RESUMABLE_KEYS

logger = logging.getLogger(__name__)

BEST_DIR = "best"
# The metric a task's runs are ranked by when `best_metric` is not given (the first one its papers report).
MAIN_METRICS = {"sequence-classification": "accuracy", "token-classification": "f1", "question-answering": "f1",
                "seq2seq": "bleu"}  # fmt: skip
# Whether a larger value is better, for every metric a task reports.
HIGHER_IS_BETTER = {"accuracy": True, "f1": True, "matthews_correlation": True, "precision": True, "recall": True,
                    "exact_match": True, "bleu": True}  # fmt: skip


def resumable_keys(save_best: bool) -> frozenset[str]:
    """The config keys a resumed run may change (`check_resumed_config`). With `save_best` the evaluation steps and
    the run length (the schedule) are kept too: the best model must be chosen among the same evaluations."""
    return RESUMABLE_KEYS - {"eval_every", "max_steps", "num_epochs"} if save_best else RESUMABLE_KEYS


def ranking_metric(task_name: str, configured: str | None) -> str:
    """The metric `save_best` ranks by: `configured`, else the task's main one; an unknown one is refused."""
    metric = configured or MAIN_METRICS.get(task_name)
    if metric is None:
        raise ValueError(f"config key 'best_metric': task {task_name!r} has no main metric; name the one to rank by.")
    if metric not in HIGHER_IS_BETTER:
        raise ValueError(
            f"config key 'best_metric': {metric!r} is not a validation metric hfzoo ranks by; valid: "
            f"{', '.join(HIGHER_IS_BETTER)} (task {task_name!r} reports its own subset)"
        )
    return metric


class BestModel:
    """The best evaluation so far (step and score of `metric`) and the model saved then, in `output_dir/best`.

    `save(folder)` writes the model into `folder` (on every process, as the recipes' savers do), which is then
    published as `best/` (`save_published`). Ties keep the earlier step. Its `state_dict` is JSON, for checkpoints.
    """

    def __init__(
        self, metric: str, output_dir: str | Path, save: Callable[[Path], None], accelerator: Accelerator
    ) -> None:
        self.metric, self.higher_is_better = metric, HIGHER_IS_BETTER[metric]
        self.folder = Path(output_dir) / BEST_DIR
        self.save, self.accelerator = save, accelerator
        self.step: int | None = None
        self.score: float | None = None
        if accelerator.is_main_process:
            restore_replaced(self.folder)  # a replacement interrupted between its two renames

    def better(self, score: float) -> bool:
        if self.score is None:
            return True
        return score > self.score if self.higher_is_better else score < self.score

    def update(self, step: int, metrics: dict[str, float]) -> bool:
        """Record the evaluation at `step`; when it is the best so far, save the model to `best/`. Returns whether."""
        if self.metric not in metrics:
            raise ValueError(
                f"config key 'best_metric': the evaluation reports {', '.join(sorted(metrics))}, not {self.metric!r}"
            )
        if not self.better(metrics[self.metric]):
            return False
        self.step, self.score = step, metrics[self.metric]
        save_published(self.accelerator, self.save, self.folder, whole=True)
        logger.info("best %s so far: %.4f at step %d, saved to %s", self.metric, self.score, step, self.folder)
        return True

    def record(self) -> dict[str, Any]:
        """What metrics.json says about the best model."""
        return {"metric": self.metric, "higher_is_better": self.higher_is_better, "step": self.step,
                "score": self.score, "folder": BEST_DIR}  # fmt: skip

    def state_dict(self) -> dict[str, Any]:
        return {"metric": self.metric, "step": self.step, "score": self.score}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.step, self.score = state["step"], state["score"]


def save_published(accelerator: Accelerator, save: Callable[[Path], None], final: Path, whole: bool = False) -> None:
    """`save(folder)` on every process into a staging folder, then published as `final` by the main process: into a
    run's output folder each saved file appears whole and the other files there stay (`hfzoo.core.files.publish_folder`);
    `whole=True` (a folder only hfzoo writes, `best/`) swaps the folder whole (`hfzoo.core.files.replace_folder`), so it is
    always one complete save."""
    staging = sibling_staging_folder(final) if whole else staging_folder(final)
    if accelerator.is_main_process and staging.exists():
        shutil.rmtree(staging)  # left by a crash
    accelerator.wait_for_everyone()
    save(staging)
    accelerator.wait_for_everyone()  # every process is done with the staging folder (it creates it) before it moves
    if accelerator.is_main_process:
        (replace_folder if whole else publish_folder)(staging, final)
    accelerator.wait_for_everyone()
