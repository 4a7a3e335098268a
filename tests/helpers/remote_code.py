"""Loading saved checkpoints as remote code (`trust_remote_code=True`) in a process where hfzoo cannot be imported,
as a user without hfzoo installed loads them."""

import os
import subprocess
import sys
import textwrap

import torch

REMOTE_LOAD_SCRIPT = """
import sys
import torch
try:
    import hfzoo
except ImportError:
    pass
else:
    sys.exit("hfzoo is importable; the remote-code check would prove nothing")
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


def load_as_remote_code(jobs: dict[str, tuple[str, str, dict]], tmp_path) -> dict[str, torch.Tensor]:
    """Run `REMOTE_LOAD_SCRIPT` in a process where hfzoo cannot be imported: for each name, the logits of the
    checkpoint folder loaded with the named Auto class and `trust_remote_code=True`, on the given inputs."""
    torch.save(jobs, tmp_path / "jobs.pt")
    process = run_without_hfzoo(REMOTE_LOAD_SCRIPT, tmp_path, "jobs.pt", "results.pt")
    assert process.returncode == 0, process.stderr[-3000:]
    return torch.load(tmp_path / "results.pt")


def run_without_hfzoo(script: str, tmp_path, *args: str) -> subprocess.CompletedProcess:
    """`script` run by Python in `tmp_path` with `args`, where hfzoo cannot be imported (as a user without hfzoo
    installed runs it), offline, with nothing on its standard input (an interactive prompt reads an empty answer)."""
    blocker = tmp_path / "blocker" / "hfzoo"
    blocker.mkdir(parents=True, exist_ok=True)
    (blocker / "__init__.py").write_text("raise ImportError('hfzoo is blocked for this test')\n")
    (tmp_path / "script.py").write_text(textwrap.dedent(script))
    env = {
        **os.environ,
        "PYTHONPATH": str(blocker.parent),
        "HF_MODULES_CACHE": str(tmp_path / "modules"),
        "HF_HUB_OFFLINE": "1",
    }
    return subprocess.run([sys.executable, "script.py", *args], cwd=tmp_path, env=env, capture_output=True, text=True,
                          stdin=subprocess.DEVNULL)  # fmt: skip
