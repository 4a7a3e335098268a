"""What the recipes share: config parts, objectives, the training loop, evaluation, exact-resume checkpoints, logging.

The recipes themselves are in `hfzoo.recipes` (also `recipes/*.py` and `hfzoo pretrain | finetune | compose`).
"""

from .checkpointing import Progress, latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .loop import Intervals, train
from .objectives import OBJECTIVES, Objective, get_objective
from .options import RunOptions, TaskTrainingOptions

__all__ = [
    "OBJECTIVES",
    "Intervals",
    "Objective",
    "Progress",
    "RunOptions",
    "TaskTrainingOptions",
    "get_objective",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "save_checkpoint",
    "train",
]
