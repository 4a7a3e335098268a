"""What a lent GPU measures in one sitting of at most 9 minutes (issue 36 item 4), prepared for the day one is lent:

1. bf16 training of `gpt-base` and `llama-base` with `torch.compile`: hfzoo compiled against native transformers
   compiled (and both eager) on the same shapes, MFU against the bf16 matmul peak measured in the same run, and
   greedy decoding with hfzoo's static cache against native (`bench_compile.py --dtype bfloat16`);
2. each `--configs` recipe pretrained on ../shared/data/enwiki in bf16 for `--minutes` of training: a short
   calibration run measures the device's speed, and the run gets the steps that fill the budget, so its learning
   rate schedule spans the budget (`hfzoo.training.logging.steps_filling`); its final validation loss, tokens/s and
   training seconds are recorded;
3. `benchmarks/README.md` rendered again from the results (`report.py`).

    python benchmarks/gpu_suite.py --results_dir $OUT     # on the GPU; copy the JSON into benchmarks/results/
    python benchmarks/gpu_suite.py --tiny --results_dir /tmp/suite --runs_dir /tmp/suite/runs   # CPU: its test

Every step is a process of its own, so a crash in one still leaves the others' results.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch
from common import REPO_ROOT, environment, write_json
from recipe_runs import read_run

from hfzoo.training.logging import steps_filling

HERE = Path(__file__).resolve().parent
DEFAULT_CONFIGS = ["recipes/configs/gpt-speedrun-small-enwiki-clm.yaml"]  # the new preset (issue 36 item 4)
COMPILE = ["--dtype", "bfloat16", "--preset-size", "base", "--models", "gpt", "llama", "--rounds", "3",
           "--steps", "2", "--batch-size", "8", "--seq-len", "1024", "--gen-batch-sizes", "1", "8",
           "--matmul-size", "8192"]  # fmt: skip
GPU_RECIPE = ["--mixed_precision", "bf16", "--cpu", "false", "--per_device_batch_size", "64", "--tensorboard", "false"]
CALIBRATION_STEPS = 30
TINY_RECIPE = ["--preset", "gpt-tiny", "--dataset", "../shared/data/enwiki/AA/wiki_00", "--vocab_size", "384",
               "--max_train_samples", "20", "--max_eval_samples", "4", "--block_size", "32", "--per_device_batch_size",
               "4", "--eval_batches", "2", "--log_every", "1", "--tensorboard", "false"]  # fmt: skip


def device_tag() -> str:
    """The results' file-name suffix: the GPU's model (`h100`, `h200`), or `cpu_tiny`."""
    if not torch.cuda.is_available():
        return "cpu_tiny"
    return torch.cuda.get_device_name().lower().replace("nvidia", "").split()[0]


def run_step(command: list[str], log: Path) -> int:
    """One step as its own process, its output shown and kept in `log`."""
    print("$", " ".join(command), flush=True)
    with log.open("w") as out:
        process = subprocess.Popen(command, cwd=REPO_ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for line in process.stdout:
            print(line, end="", flush=True)
            out.write(line)
    return process.wait()


def pretrain(config: str, run_dir: Path, recipe: list[str], steps: int, log: Path, *extra: str) -> int:
    command = [sys.executable, "recipes/pretrain.py", "--config", config, *recipe, "--max_steps", str(steps),
               "--eval_every", str(steps), "--save_every", str(steps), "--output_dir", str(run_dir), *extra]
    return run_step(command, log)


def wall_budget_runs(args, recipe: list[str]) -> dict:
    """Each config: a calibration run, then the run whose steps fill `--minutes`, trained with its tokenizer."""
    rows = []
    for config in args.configs:
        name = Path(config).stem
        calibration, run_dir = args.runs_dir / f"{name}-calibration", args.runs_dir / name
        for folder in (calibration, run_dir):
            shutil.rmtree(folder, ignore_errors=True)
        steps = 3 if args.tiny else CALIBRATION_STEPS
        if pretrain(config, calibration, recipe, steps, args.runs_dir / f"{name}-calibration.log", "--log_every", "1"):
            rows.append({"config": config, "failed": "calibration"})
            continue
        steps = steps_filling(args.minutes, calibration)
        code = pretrain(config, run_dir, recipe, steps, args.runs_dir / f"{name}.log", "--tokenizer", str(calibration))
        run = read_run(run_dir) if code == 0 else {"failed": f"exit code {code}"}
        rows.append({"config": config, "minutes": args.minutes, "planned_steps": steps, **run})
    return {"benchmark": "wall_budget", "settings": {"recipe_overrides": recipe, "minutes": args.minutes},
            "results": rows}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--results_dir", type=Path, default=HERE / "results")
    parser.add_argument("--runs_dir", type=Path, default=REPO_ROOT / "runs" / "gpu-suite")
    parser.add_argument("--configs", nargs="+", default=DEFAULT_CONFIGS, help="recipe configs run for --minutes each")
    parser.add_argument("--minutes", type=float, default=2.0, help="each config's training budget (--tiny: seconds)")
    parser.add_argument("--tiny", action="store_true", help="on the CPU at tiny sizes: the script's own test")
    args = parser.parse_args(argv)
    if args.tiny and args.minutes == parser.get_default("minutes"):
        args.minutes = 0.05
    started = time.monotonic()
    args.results_dir.mkdir(parents=True, exist_ok=True)
    args.runs_dir.mkdir(parents=True, exist_ok=True)
    tag = device_tag()
    compile_json = args.results_dir / f"compile_bf16_{tag}.json"
    compile_args = ["--tiny", "--dtype", "bfloat16"] if args.tiny else [*COMPILE, "--device", "cuda"]
    failed = run_step([sys.executable, str(HERE / "bench_compile.py"), *compile_args, "--output", str(compile_json)],
                      args.runs_dir / "compile.log")  # fmt: skip
    budget = wall_budget_runs(args, TINY_RECIPE if args.tiny else GPU_RECIPE)
    budget["environment"] = environment()
    budget["command"] = "python benchmarks/gpu_suite.py"
    write_json(args.results_dir / f"wall_budget_{tag}.json", budget)
    failed += sum("failed" in row for row in budget["results"])
    if args.results_dir.resolve() == (HERE / "results").resolve():
        failed += run_step([sys.executable, str(HERE / "report.py")], args.runs_dir / "report.log")
    print(f"gpu suite: {time.monotonic() - started:.0f} s, {failed} step(s) failed", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
