"""What recipes share: the run config, objectives, exact-resume checkpoints, logging, the loop's pieces.

`hfzoo.training.pretrain.main(argv)` runs the pretraining recipe (also `recipes/pretrain.py` and
`hfzoo pretrain`).
"""

from .checkpointing import Progress, latest_checkpoint, list_checkpoints, load_checkpoint, save_checkpoint
from .config import PretrainConfig, parse_args
from .objectives import OBJECTIVES, Objective, get_objective

__all__ = [
    "OBJECTIVES",
    "Objective",
    "PretrainConfig",
    "Progress",
    "get_objective",
    "latest_checkpoint",
    "list_checkpoints",
    "load_checkpoint",
    "parse_args",
    "save_checkpoint",
]
