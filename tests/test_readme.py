"""README examples run exactly as written: every ```python block, in order, in one fresh interpreter per block."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")
PYTHON_BLOCKS = re.findall(r"```python\n(.*?)```", README, flags=re.S)
HFZOO_COMMANDS = [
    line.split("#")[0].strip()
    for block in re.findall(r"```bash\n(.*?)```", README, flags=re.S)
    for line in block.splitlines()
    if line.strip().startswith(".venv/bin/hfzoo")
]


def _run(args: list[str], cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(cwd / "modules")}
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("readme")


def test_readme_has_examples():
    assert PYTHON_BLOCKS and HFZOO_COMMANDS


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
    executable = Path(sys.executable).parent / "hfzoo"
    result = _run([str(executable), *command.split()[1:]], workdir)
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.strip()
