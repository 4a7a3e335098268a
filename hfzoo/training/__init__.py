"""What the recipes share: config parts, objectives, the training loop's pieces, evaluation, exact-resume checkpoints,
logging, and the skeleton of the two recipes that train on a labelled task (`task_run`).

The recipes themselves are in `hfzoo.commands` (also `recipes/*.py` and `hfzoo pretrain | finetune | compose`).
"""

from ..objectives.objective import OBJECTIVES, Objective, get_objective
from .checkpointing import Progress, latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .loop import TrainingSteps
from .options import RunOptions, TaskTrainingOptions

__all__ = [
    "OBJECTIVES",
    "Objective",
    "Progress",
    "RunOptions",
    "TaskTrainingOptions",
    "TrainingSteps",
    "get_objective",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "save_checkpoint",
]
