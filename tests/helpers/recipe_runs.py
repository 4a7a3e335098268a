"""Running the recipes as users do: their `main` in this process, or `python recipes/<name>.py` (one process,
killed at a random step, or two under torchrun) with the environment the Makefile gives them."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
from accelerate.state import AcceleratorState, GradientState
from tests.helpers.paths import PRETRAIN_TEST_CONFIG, REPO

from hfzoo.commands import finetune, pretrain


def run_recipe(main: Callable[[list[str]], Path], *args) -> Path:
    """A recipe's `main(argv)` in this process; accelerate's process-wide state is reset after, as a new process
    would have it."""
    try:
        return main([str(a) for a in args])
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)


def run_pretrain(*args) -> Path:
    """`hfzoo pretrain --config recipes/configs/test-gpt-tiny-clm.yaml <args>` in this process."""
    return run_recipe(pretrain.main, "--config", PRETRAIN_TEST_CONFIG, *args)


def run_finetune(*args) -> Path:
    """`hfzoo finetune <args>` in this process."""
    return run_recipe(finetune.main, *args)


def in_one_thread(recipe_main: Callable[[list[str]], Path], *args) -> Path:
    """A recipe's `main` in this process with one thread, as each torchrun worker has it."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return run_recipe(recipe_main, *args)
    finally:
        torch.set_num_threads(threads)


def recipe_env(threads: int | None = None) -> dict[str, str]:
    """Training subprocesses as the Makefile starts them: freed pages stay mapped (performance notes), offline.

    Threads default to this process's count: float sums are split by thread, so runs compared bit for bit with an
    in-process run must use as many.
    """
    return {
        **os.environ,
        "MALLOC_MMAP_THRESHOLD_": "17179869184",
        "MALLOC_TRIM_THRESHOLD_": "17179869184",
        "HF_HUB_OFFLINE": "1",
        "HF_EVALUATE_OFFLINE": "1",
        "TOKENIZERS_PARALLELISM": "false",
        "OMP_NUM_THREADS": str(threads or torch.get_num_threads()),
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])),
    }


def on_two_processes(recipe: Path, *args) -> list[str]:
    """`torchrun --standalone --nproc_per_node 2 <recipe> <args>` (standalone: on a free port)."""
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(recipe),
            *map(str, args)]  # fmt: skip


def launch(command: list[str]) -> subprocess.CompletedProcess:
    """Run `command` (one thread per process) to its end; it must succeed."""
    result = subprocess.run(command, env=recipe_env(threads=1), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    return result


def complete_records(out: Path) -> list[dict]:
    """The run log's complete records (the writer may be mid-line)."""
    records = []
    for line in (out / "log.jsonl").read_text(encoding="utf-8").splitlines():
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return records


def kill_at_a_random_step(command: list[str], out: Path, log_file: Path, max_steps: int) -> int:
    """Start `command`, a run of `max_steps` steps that checkpoints every 3; SIGKILL it once it has logged a random
    step after its first checkpoint and 4 or more before its end. Returns that step."""
    target = random.SystemRandom().randint(4, max_steps - 4)  # the recipes seed `random` itself
    with open(log_file, "w") as log:
        process = subprocess.Popen(command, env=recipe_env(), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 180
        while process.poll() is None and time.monotonic() < deadline:
            if (out / "log.jsonl").is_file() and any(r.get("step", 0) >= target for r in complete_records(out)):
                break
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, log_file.read_text()[-3000:]
    return target


def one_step_finetune_args(checkpoint: Path, tmp_path: Path) -> list[str]:
    """Fine-tuning `checkpoint` for one step on four labelled rows."""
    data = tmp_path / "data"
    data.mkdir()
    for split in ("train", "validation"):
        rows = ["text,label", "a fine film,1", "a dull film,0", "very good,1", "very bad,0"]
        (data / f"{split}.csv").write_text("\n".join(rows) + "\n")
    return ["--model", str(checkpoint), "--task", "sequence-classification", "--train_file", str(data / "train.csv"),
            "--validation_file", str(data / "validation.csv"), "--text_column", "text", "--label_column", "label",
            "--max_steps", "1", "--output_dir", str(tmp_path / "run")]  # fmt: skip


def finetune_on(checkpoint: Path, tmp_path: Path) -> None:
    """The fine-tuning recipe as `hfzoo finetune` runs it, one step on four rows; it loads the model first."""
    run_finetune(*one_step_finetune_args(checkpoint, tmp_path))
