"""What every process of the test suite sets up before it imports anything heavy.

The fixtures that tests in several folders use are in tests/helpers/suite_fixtures.py (and the modules it imports),
those of one folder in its conftest.py. This file imports neither torch nor transformers: xdist's controller, which
hands test files to the workers and runs none, would spend 8-16 s on the 2-core machine importing them before it
starts the workers.
"""

import atexit
import os
import shutil
import tempfile
from pathlib import Path

import pytest

# `make test` runs two xdist workers, one per core: the processes tests start (recipes, benchmarks, README commands)
# get one OpenMP thread too, unless they set their own, so they do not fight the other worker for its core.
os.environ["OMP_NUM_THREADS"] = "1"
if "PYTEST_XDIST_WORKER" in os.environ and "HF_MODULES_CACHE" not in os.environ:
    # transformers copies a checkpoint's code into HF_MODULES_CACHE under the folder's name: two workers loading
    # folders of the same name at once could import a half-copied file. Each worker gets its own (read at import).
    os.environ["HF_MODULES_CACHE"] = tempfile.mkdtemp(prefix=f"hfzoo-modules-{os.environ['PYTEST_XDIST_WORKER']}-")
    atexit.register(shutil.rmtree, os.environ["HF_MODULES_CACHE"], ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    """Register the suite's fixtures in every process that runs tests: all but xdist's controller (`dsession`)."""
    if not session.config.pluginmanager.has_plugin("dsession"):
        session.config.pluginmanager.import_plugin("tests.helpers.suite_fixtures")


# `make test`'s xdist (`--dist loadfile --no-loadscope-reorder`) hands a worker the next file in collection order
# whenever it runs short: the longest files first leave only short ones for the end, where a long one keeps one
# worker busy while the other idles (xdist's own order, most tests first, ran the one 69 s quickstart test last).
# Those over 10 s by `--durations=0` on the development machine (943 s in all), longest first.
LONGEST_FILES_FIRST = (
    "test_quickstart.py", "commands/test_finetune_resume.py", "training/test_fsdp.py",
    "commands/test_pretrain_recipe.py", "commands/test_finetune_recipe.py", "commands/test_fsdp_finetune.py",
    "test_serve_classify.py", "data/test_tokenizer_training.py", "commands/test_compose_recipe.py",
    "commands/test_compose_resume.py", "test_serve.py", "training/test_resume_inputs.py", "adapters/test_compose.py",
    "cards/test_generated_docs.py", "test_cli_refusals.py", "cards/test_result_cards.py", "training/test_compile.py",
    "convert/test_convert_adapters.py", "adapters/test_bottleneck.py", "tasks/test_finetune_formatting.py",
    "models/test_encoder.py", "training/test_ulmfit.py", "models/test_encoder_decoder.py",
    "models/test_remote_code.py", "convert/test_convert.py", "data/test_collators.py",
    "models/test_encoder_decoder_ecosystem.py",
)  # fmt: skip


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    tests = Path(__file__).parent
    missing = [name for name in LONGEST_FILES_FIRST if not (tests / name).is_file()]
    if missing:
        raise pytest.UsageError(f"tests/conftest.py LONGEST_FILES_FIRST names files that do not exist: {missing}")
    rank = {str(tests / name): position for position, name in enumerate(LONGEST_FILES_FIRST)}
    items.sort(key=lambda item: rank.get(str(item.path), len(rank)))  # stable: each file keeps its order
