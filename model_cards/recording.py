"""Recording a run of a recipe, for the result cards: the exact command, the machine and device, the code's commit and
the load average while it ran, in `run_record.json` beside the run's own files. Shared by the pretraining and the
fine-tuning result generators, so that every reported number says under which conditions it was measured.

A run may take several invocations (segments): one stopped by a time budget (`Budget`, e.g. to fit a lent GPU's
10-minute calls) continues from its latest checkpoint in the next, and its record then sums the segments since the
run last started from scratch. `run_record.json` is the last file a run's recording writes: a run is complete
(`run_complete`) when its record says the recipe exited with 0, unstopped, and the recipe's results file is there."""

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
from dataclasses import dataclass, field
from typing import Any

import torch

from hfzoo.core.files import write_atomic
from hfzoo.core.recorded_paths import recorded_path, resolve_recorded

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


@dataclass
class Budget:
    """When to stop recording runs: once `minutes` have passed since it was made (none: never), or once `stop` was
    called (a SIGTERM or Ctrl-C to the generator). A run still going then is terminated, keeping its checkpoints;
    `left` collects the runs not finished, for the generator to name."""

    minutes: float | None = None
    started: float = field(default_factory=time.monotonic)
    stopped: bool = False
    left: list[str] = field(default_factory=list)

    def stop(self, *_: Any) -> None:
        self.stopped = True

    def spent(self) -> bool:
        return self.stopped or (self.minutes is not None and time.monotonic() - self.started >= 60 * self.minutes)


def device_name(device: str) -> str:
    """What a card names as the device runs trained on: the GPU's model for `cuda`, the CPU's for `cpu`."""
    return f"{torch.cuda.get_device_name(0)} (cuda)" if device == "cuda" else f"{_machine()['cpu']} (cpu)"


def run_complete(run_dir: Path, results_file: str = "metrics.json") -> bool:
    """Whether `run_dir` holds a finished run: its record (written last, once the recipe has exited) says the recipe
    exited with 0 and was not stopped, and the recipe's `results_file` is there. Anything else is run (again, or on
    from its latest checkpoint)."""
    if not (run_dir / RUN_RECORD).is_file() or not (run_dir / results_file).is_file():
        return False
    record = json.loads((run_dir / RUN_RECORD).read_text())
    return record.get("exit_code") == 0 and not record.get("stopped", False)


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


def run_recorded(
    run_dir: Path,
    recipe: str,
    recipe_args: list[str],
    env: dict[str, str] | None = None,
    *,
    budget: Budget | None = None,
    device: str | None = None,
    resumed: bool = False,
) -> int | None:
    """Run `recipe` (a script path relative to the repository) with `recipe_args` under `nice -n 10` with the malloc
    thresholds (and `env`, e.g. OMP_NUM_THREADS), its output in `run_dir/stdout.log`; write the command, the machine,
    the `device` (`device_name`), the code's commit and the load average (sampled every 15 s) to
    `run_dir/run_record.json`. Returns the recipe's exit code, or None when `budget` ran out first: the recipe is then
    terminated (its checkpoints kept) and the record says `stopped`. `resumed`: the recipe continues this folder's
    run from a checkpoint, so the record carries the earlier segments (their wall time counts); otherwise it starts
    a new record."""
    malloc = [f"{key}={value}" for key, value in {**(env or {}), **MALLOC_TUNED}.items()]
    command = ["nice", "-n", "10", "env", *malloc, shown(sys.executable), recipe, *RECORDER_ARGS, *recipe_args]
    segment = {
        "command": shlex.join(command),
        "started": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "git": _git(),
        **({"device": device_name(device)} if device else {}),
    }
    start, samples = time.time(), []
    if budget is None:  # `kill` of this recorder must not leave the run behind, training with nobody recording it
        signal.signal(signal.SIGTERM, lambda *_: sys.exit(f"record: terminated; {run_dir} is incomplete"))
    with (run_dir / "stdout.log").open("a" if resumed else "w", encoding="utf-8") as output:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=output, stderr=subprocess.STDOUT)
        try:
            while process.poll() is None and not (budget is not None and budget.spent()):
                samples.append(_load_sample(start))
                sampled = time.time()
                while time.time() - sampled < LOAD_SAMPLE_SECONDS and process.poll() is None:
                    if budget is not None and budget.spent():
                        break
                    time.sleep(0.2)
        finally:
            if process.poll() is None:
                process.terminate()
                try:
                    process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()
    stopped = budget is not None and budget.spent() and process.returncode != 0
    segment.update(wall_s=round(time.time() - start, 1), exit_code=process.returncode, stopped=stopped)
    earlier = json.loads((run_dir / RUN_RECORD).read_text()) if resumed and (run_dir / RUN_RECORD).is_file() else {}
    segments = [*earlier.get("segments", []), segment]
    info = {
        "command": segments[0]["command"],  # the one that started the run: a resumed run ends where it would have
        "started": segments[0]["started"],
        "machine": _machine(),
        "git": segment["git"],
        **({"device": ", ".join(dict.fromkeys(s["device"] for s in segments if "device" in s))} if device else {}),
        "process_wall_s": round(sum(s["wall_s"] for s in segments), 1),
        "exit_code": process.returncode,
        "stopped": stopped,
        "load_average_samples": [*earlier.get("load_average_samples", []), *samples, _load_sample(start)],
        "segments": segments,
    }
    write_atomic(run_dir / RUN_RECORD, json.dumps(info, indent=1))
    return None if stopped else process.returncode
