"""README examples run as written: every ```python block in order, every hfzoo command, every recipe launch.

Recipe launches (`python recipes/...`, `torchrun ...`, `accelerate launch ...`) run exactly as written plus
overrides that shrink the run (any config key can be overridden on the command line), so the suite stays fast.
"""

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
BASH_LINES = [
    line.split(" #")[0].strip()
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    for line in block.splitlines()
    if line.strip()
]
HFZOO_COMMANDS = [line for line in BASH_LINES if line.startswith(".venv/bin/hfzoo")]
RECIPE_LAUNCHES = [line for line in BASH_LINES if line.startswith(("python recipes/", "torchrun", "accelerate launch"))]
SETUP_COMMANDS = {"make quickstart", "make test"}  # run by tests/test_quickstart.py and by CI itself
SHRINK = ["--max_steps", "2", "--max_train_samples", "16", "--max_eval_samples", "8", "--block_size", "32",
          "--per_device_batch_size", "2", "--gradient_accumulation_steps", "1", "--vocab_size", "512",
          "--eval_every", "2", "--save_every", "2"]  # fmt: skip


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(cwd / "modules"), "PATH": f"{BIN}:{os.environ['PATH']}"}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("readme")


def test_every_readme_command_is_exercised():
    assert PYTHON_BLOCKS and HFZOO_COMMANDS and RECIPE_LAUNCHES
    unexercised = set(BASH_LINES) - set(HFZOO_COMMANDS) - set(RECIPE_LAUNCHES) - SETUP_COMMANDS
    assert not unexercised, f"README commands no test runs: {unexercised}"


@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_python_block_runs(index: int, workdir: Path):
    # Blocks build on each other (save, then load), so each runs after the ones before it in the same folder.
    for earlier in range(index + 1):
        marker = workdir / f".block{earlier}.done"
        if marker.exists():
            continue
        result = _run([sys.executable, "-c", PYTHON_BLOCKS[earlier]], workdir)
        assert result.returncode == 0, f"README block {earlier} failed:\n{PYTHON_BLOCKS[earlier]}\n{result.stderr[-3000:]}"
        marker.touch()


@pytest.mark.parametrize("command", HFZOO_COMMANDS)
def test_hfzoo_command_runs(command: str, workdir: Path):
    result = _run([str(BIN / "hfzoo"), *shlex.split(command)[1:]], workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip() or result.stderr.strip()


@pytest.mark.parametrize("command", RECIPE_LAUNCHES)
def test_recipe_launch_runs(command: str, tmp_path: Path):
    args = shlex.split(command)
    args[0] = sys.executable if args[0] == "python" else str(BIN / args[0])
    result = _run([*args, *SHRINK, "--output_dir", str(tmp_path / "run")], ROOT)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-3000:]
    assert (tmp_path / "run" / "model.safetensors").is_file()
