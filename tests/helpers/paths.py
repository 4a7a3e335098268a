"""Where the repository, its recipes and the shared real data sets are."""

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
# ../shared/data beside the repository: tests that need the real data sets skip without it.
SHARED_DATA = REPO.parent / "shared" / "data"
PRETRAIN_RECIPE = REPO / "recipes" / "pretrain.py"
# gpt-tiny with shuffling, dropout 0.1 and gradient accumulation 2 on: 8 optimizer steps per epoch, 20 steps,
# checkpoints every 4.
PRETRAIN_TEST_CONFIG = REPO / "recipes" / "configs" / "test-gpt-tiny-clm.yaml"
