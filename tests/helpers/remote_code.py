"""Loading saved checkpoints as remote code (`trust_remote_code=True`) in a process where hfzoo cannot be imported,
as a user without hfzoo installed loads them.

One such process serves each test worker (`HfzooFreePython`): on a 2-core CPU a new one spends 8-10 s importing
torch and transformers, which ten tests each paid. The scripts it runs are written as standalone scripts and each
runs as `python script.py args...` would, in its own folder, with its own output files.
"""

import json
import os
import select
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest
import torch

SERVER = Path(__file__).with_name("hfzoo_free_server.py")
BLOCKED = "hfzoo is hidden from this process on purpose"

REMOTE_LOAD_SCRIPT = """
import sys
import torch
import transformers

results = {}
for name, (auto_name, folder, inputs) in torch.load(sys.argv[1]).items():
    model = getattr(transformers, auto_name).from_pretrained(folder, trust_remote_code=True).eval()
    assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
    with torch.no_grad():
        output = model(**inputs)
    results[name] = output.logits
torch.save(results, sys.argv[2])
"""


class HfzooFreePython:
    """A Python process in which `import hfzoo` fails for real (a package of that name that raises comes first on its
    PYTHONPATH), offline, with its own transformers module cache and HF home under `root`; started at the first
    script and again after one that timed out."""

    def __init__(self, root: Path):
        self.root = root
        self.modules = root / "modules"
        self.process: subprocess.Popen | None = None
        self.log = None

    def _start(self) -> subprocess.Popen:
        blocker = self.root / "blocker" / "hfzoo"
        blocker.mkdir(parents=True, exist_ok=True)
        (blocker / "__init__.py").write_text(f"raise ImportError({BLOCKED!r})\n")
        env = {
            **os.environ,
            "PYTHONPATH": str(blocker.parent),
            "HF_MODULES_CACHE": str(self.modules),
            "HF_HOME": str(self.root / "hf_home"),
            "HF_HUB_OFFLINE": "1",
            "OMP_NUM_THREADS": "1",
        }
        self.log = open(self.root / "server.log", "ab")
        return subprocess.Popen([sys.executable, str(SERVER)], cwd=self.root, env=env, stdin=subprocess.PIPE,
                                stdout=subprocess.PIPE, stderr=self.log, text=True)  # fmt: skip

    def run(self, script: str, folder: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
        """`script` saved as `folder/script.py` and run there with `args`: its exit status, standard output and
        error, as `subprocess.run` gives them for a new process."""
        if self.process is None or self.process.poll() is not None:
            self.process = self._start()
        (folder / "script.py").write_text(textwrap.dedent(script))
        request = {"script": str(folder / "script.py"), "args": list(args), "cwd": str(folder)}
        self.process.stdin.write(json.dumps(request) + "\n")
        self.process.stdin.flush()
        ready, _, _ = select.select([self.process.stdout], [], [], timeout)
        reply = self.process.stdout.readline() if ready else ""
        if not reply:
            self.close()
            log = (self.root / "server.log").read_text()[-3000:]
            raise AssertionError(f"no answer from the hfzoo-free process within {timeout} s; its log ends:\n{log}")
        returncode = json.loads(reply)["returncode"]
        stdout, stderr = ((folder / name).read_text() for name in ("stdout.txt", "stderr.txt"))
        return subprocess.CompletedProcess(["python", "script.py", *args], returncode, stdout, stderr)

    def close(self) -> None:
        if self.process is not None:
            self.process.kill()
            self.process.wait()
            self.process = None
            self.log.close()


def load_as_remote_code(
    python: HfzooFreePython, jobs: dict[str, tuple[str, str, dict]], tmp_path: Path
) -> dict[str, torch.Tensor]:
    """For each name, the logits of the checkpoint folder loaded with the named Auto class and
    `trust_remote_code=True` where hfzoo cannot be imported, on the given inputs."""
    torch.save(jobs, tmp_path / "jobs.pt")
    process = python.run(REMOTE_LOAD_SCRIPT, tmp_path, "jobs.pt", "results.pt")
    assert process.returncode == 0, process.stderr[-3000:]
    return torch.load(tmp_path / "results.pt")


@pytest.fixture(scope="session")
def hfzoo_free_python(tmp_path_factory) -> Iterator[HfzooFreePython]:
    """This test worker's `HfzooFreePython`."""
    python = HfzooFreePython(tmp_path_factory.mktemp("hfzoo_free"))
    yield python
    python.close()
