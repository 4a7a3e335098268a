"""The README runs as written, top to bottom, as a user would: every ```python block and every command.

Blocks run in document order in one workspace (later examples use what earlier ones saved). `hfzoo` commands run
exactly as written; recipe launches (`.venv/bin/python recipes/...`, `.venv/bin/torchrun ...`,
`.venv/bin/accelerate launch ...`) run as written
plus overrides that shrink the run (any config key can be overridden on the command line). `make quickstart` and
`make test` are run by tests/test_quickstart.py and by CI itself. `hfzoo serve` runs in the background until the end of
its block, and the block's `curl` commands and `python -c` clients query it.
"""

import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
README = (ROOT / "README.md").read_text(encoding="utf-8")
BLOCKS = re.findall(r"```(python|bash)\n(.*?)```", README, flags=re.S)
SETUP_COMMANDS = {"make quickstart", "make test"}
RECIPE_PREFIXES = (".venv/bin/python recipes/", ".venv/bin/torchrun", ".venv/bin/accelerate launch")
SHRINK = ["--max_steps", "2", "--max_train_samples", "16", "--max_eval_samples", "8", "--block_size", "32",
          "--per_device_batch_size", "2", "--gradient_accumulation_steps", "1", "--vocab_size", "512",
          "--eval_every", "2", "--save_every", "2"]  # fmt: skip
# Fine-tuning reads examples, not blocks: its inputs are cut by max_length.
SHRINK_FINETUNE = [value if value != "--block_size" else "--max_length" for value in SHRINK]


def _commands(block: str) -> list[str]:
    return [line.split(" #")[0].strip() for line in block.splitlines() if line.strip()]


def _run(args: list[str], cwd: Path, workdir: Path) -> subprocess.CompletedProcess:
    """`args` in `cwd`; the code of loaded checkpoints is cached in the workspace, never in the repository."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(workdir / "modules"),
           "PATH": f"{BIN}:{os.environ['PATH']}"}  # fmt: skip
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def _execute(kind: str, body: str, workdir: Path) -> None:
    if kind == "python":
        result = _run([sys.executable, "-c", body], workdir, workdir)
        assert result.returncode == 0, f"README block failed:\n{body}\n{result.stderr[-3000:]}"
        return
    server = None
    try:
        for command in _commands(body):
            server = _execute_command(command, workdir) or server
    finally:
        if server is not None:
            server.terminate()
            server.wait(timeout=30)


def _start_server(args: list[str], workdir: Path) -> subprocess.Popen:
    """`hfzoo serve` as written, in the background until its block ends; returned once it answers /health."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_MODULES_CACHE": str(workdir / "modules")}
    server = subprocess.Popen([str(BIN / "hfzoo"), *args[1:]], cwd=workdir, env=env, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)  # fmt: skip
    port = args[args.index("--port") + 1]
    deadline = time.monotonic() + 120
    while subprocess.run(["curl", "-sf", f"localhost:{port}/health"], capture_output=True).returncode != 0:
        assert server.poll() is None, f"README server exited:\n{server.stdout.read()[-3000:]}"
        assert time.monotonic() < deadline, "the README's hfzoo serve did not answer /health within 120 s"
        time.sleep(0.5)
    return server


def _execute_command(command: str, workdir: Path) -> subprocess.Popen | None:
    """Run one README command (a server it starts is returned, to be stopped at the end of its block)."""
    if command in SETUP_COMMANDS:
        return None
    args = shlex.split(command)
    if command.startswith(".venv/bin/hfzoo serve"):
        return _start_server(args, workdir)
    if command.startswith("curl "):
        result = _run(args, workdir, workdir)
        assert result.returncode == 0 and '"error"' not in result.stdout, f"{command}\n{result.stdout}{result.stderr}"
        return None
    if command.startswith(".venv/bin/hfzoo"):
        result = _run([str(BIN / "hfzoo"), *args[1:]], workdir, workdir)
    elif command.startswith(".venv/bin/python -c "):  # a client of the block's server, as written
        result = _run([sys.executable, *args[1:]], workdir, workdir)
    elif command.startswith(RECIPE_PREFIXES):
        args[0] = str(BIN / Path(args[0]).name)  # .venv/bin/X: the X of the environment running the tests
        output_dir = Path(tempfile.mkdtemp(prefix="recipe-launch-", dir=workdir))  # a new folder per launch
        shrink = SHRINK_FINETUNE if any(arg.endswith("finetune.py") for arg in args) else SHRINK
        result = _run([*args, *shrink, "--output_dir", str(output_dir)], ROOT, workdir)
        assert (output_dir / "model.safetensors").is_file(), result.stderr[-3000:]
    else:
        raise AssertionError(f"README command that no test knows how to run: {command}")
    assert result.returncode == 0, f"README command failed: {command}\n{result.stdout[-1500:]}{result.stderr[-3000:]}"
    return None


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("readme")


def test_readme_has_examples_of_every_kind():
    kinds = {kind for kind, _ in BLOCKS}
    commands = [c for kind, body in BLOCKS if kind == "bash" for c in _commands(body)]
    assert kinds == {"python", "bash"} and SETUP_COMMANDS <= set(commands)
    assert any(c.startswith(RECIPE_PREFIXES) for c in commands)


def _needs_shared_data(body: str) -> bool:
    """Whether a block reads `../shared` (a real data set beside the repository), directly or through a --config."""
    configs = re.findall(r"--config (\S+)", body)
    return "../shared" in body or any("../shared" in (ROOT / config).read_text(encoding="utf-8") for config in configs)


# About 6 minutes of one worker (26 blocks, each a fresh process): CI's slow tier runs the README as written; each
# command it shows is tested in `make test` by the tests of its recipe or command.
@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_block_runs_in_order(index: int, workdir: Path):
    shared_absent = not (ROOT.parent / "shared").is_dir()
    if shared_absent and _needs_shared_data(BLOCKS[index][1]):
        pytest.skip(f"this README block trains on a real data set in {ROOT.parent / 'shared'}, which is absent")
    for earlier in range(index + 1):
        marker = workdir / f".block{earlier}.done"
        if not marker.exists():
            if not (shared_absent and _needs_shared_data(BLOCKS[earlier][1])):  # its outputs feed no later block
                _execute(*BLOCKS[earlier], workdir)
            marker.touch()
