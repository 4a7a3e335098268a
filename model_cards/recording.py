"""Recording a run of a recipe, for the result cards: the exact command, the machine, the code's commit and the load
average while it ran, in `run_record.json` beside the run's own files. Shared by the pretraining and the fine-tuning
result generators, so that every reported number says under which conditions it was measured."""

from __future__ import annotations

import json
import os
import platform
import shlex
import signal
import subprocess
import sys
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import torch

from hfzoo.data.recorded_paths import recorded_path, resolve_recorded
from hfzoo.files import write_atomic

REPO_ROOT = Path(__file__).resolve().parents[1]
RUN_RECORD = "run_record.json"
LOAD_SAMPLE_SECONDS = 15
# glibc otherwise returns freed memory to the OS and faults it back in on every step (see benchmarks/);
# it reads these only at process start, hence `env` in the command.
MALLOC_TUNED = {"MALLOC_MMAP_THRESHOLD_": "17179869184", "MALLOC_TRIM_THRESHOLD_": "17179869184"}


def _git() -> dict[str, Any]:
    """The checkout's commit and its uncommitted files under hfzoo/ and recipes/ (others edit the same tree)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout

    dirty = git("status", "--porcelain", "--", "hfzoo", "recipes").splitlines()  # "XY path": status, then path
    return {"commit": git("rev-parse", "HEAD").strip(), "uncommitted": [line[3:] for line in dirty]}


def _machine() -> dict[str, Any]:
    cpu = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )  # fmt: skip
    memory_kb = int(Path("/proc/meminfo").read_text().split()[1])
    return {
        "cpu": cpu,
        "cores": len(os.sched_getaffinity(0)),
        "memory_gib": round(memory_kb / 2**20, 1),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_threads": torch.get_num_threads(),
    }


def _load_sample(start: float) -> list[float]:
    """[seconds since start, 1-, 5-, 15-minute load average] (the numbers `uptime` prints)."""
    return [round(time.time() - start, 1), *os.getloadavg()]


def shown(path: str) -> str:
    """`path` as a record shows it, never a path of the machine: relative to the repository (so the recorded command
    runs in any checkout), the interpreter outside it as `python`, installed data by its package (`recorded_path`)."""
    path = os.path.abspath(path)  # not resolve(): a virtualenv's python is a symlink out of the repository
    if path == os.path.abspath(sys.executable) and not Path(path).is_relative_to(REPO_ROOT):
        return "python"
    return recorded_path(path, REPO_ROOT).removeprefix("./")


def run_metrics(run_dir: Path) -> dict[str, Any]:
    """The run's `metrics.json`, its paths (recorded relative to the run folder; absolute in older runs) shown
    relative to the repository like the commands: the base model and the composed adapters' folders."""

    def repository_path(value: str) -> str:
        local = value.startswith(("./", "../")) or os.path.isabs(value)
        return shown(resolve_recorded(value, run_dir)) if local else value

    metrics = json.loads((run_dir / "metrics.json").read_text())
    for key in ("model", "imported_from"):
        if key in metrics:
            metrics[key] = repository_path(metrics[key])
    for adapter in metrics.get("composition", {}).get("adapters", []):
        adapter["folder"] = repository_path(adapter["folder"])
    return metrics


# The recorder writes stdout.log (and the data split) into the run's folder before the recipe starts, and its callers
# refuse a folder that holds a run: the recipe may write into that folder of files.
RECORDER_ARGS = ("--overwrite_output_dir", "true")


def run_recorded(run_dir: Path, recipe: str, recipe_args: list[str], env: dict[str, str] | None = None) -> int:
    """Run `recipe` (a script path relative to the repository) with `recipe_args` under `nice -n 10` with the malloc
    thresholds (and `env`, e.g. OMP_NUM_THREADS), its output in `run_dir/stdout.log`; write the command, the machine,
    the code's commit and the load average (sampled every 15 s) to `run_dir/run_record.json`. Returns the recipe's
    exit code."""
    malloc = [f"{key}={value}" for key, value in {**(env or {}), **MALLOC_TUNED}.items()]
    command = ["nice", "-n", "10", "env", *malloc, shown(sys.executable), recipe, *RECORDER_ARGS, *recipe_args]
    info = {
        "command": shlex.join(command),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "machine": _machine(),
        "git": _git(),
    }
    start, samples = time.time(), []
    # `kill` of this recorder must not leave the run behind, training with nobody recording it.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"record: terminated; {run_dir} is incomplete"))
    with (run_dir / "stdout.log").open("w", encoding="utf-8") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
        try:
            while True:
                samples.append(_load_sample(start))
                try:
                    process.wait(timeout=LOAD_SAMPLE_SECONDS)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            if process.poll() is None:
                process.terminate()
    info.update(
        process_wall_s=round(time.time() - start, 1),
        exit_code=process.returncode,
        load_average_samples=samples + [_load_sample(start)],
    )
    write_atomic(run_dir / RUN_RECORD, json.dumps(info, indent=1))
    return process.returncode


