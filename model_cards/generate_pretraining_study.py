"""Does hfzoo's own pretraining pay? One encoder pretrained on a real corpus with each objective (masked LM, SpanBERT,
ELECTRA, ...) at equal compute, then every pretrained encoder and the same encoder from random weights fine-tuned
on the same tasks with the same recipe settings (issue 35). This script makes the runs; each is recorded (command,
machine, load) and continued from its checkpoint when stopped, so the study goes on over several sessions:

    # Everything after `--` goes to every pretraining run; `--steps` gives each objective its run length (equal
    # compute: an objective whose step costs more gets fewer steps). `--max_minutes` stops cleanly (exit code 75),
    # keeping checkpoints; the same command continues where it stopped.
    python model_cards/generate_pretraining_study.py run runs/results/pretraining-enwiki \
        --steps mlm=6000 spanbert=6000 --tasks conll2003 sst2-1k sst2 rte --max_minutes 120 \
        -- --config recipes/configs/bert-small-enwiki-mlm.yaml --tokenizer runs/results/pretraining-enwiki/tokenizer

Run folders: `pretrain-<objective>`, then `<task>-<base>-lr<rate>-seed<seed>` for every base (each objective, and
`scratch`: the first objective's config and tokenizer with random weights, the floor that shows whether pretraining
transferred). The fine-tuning learning rate is chosen per base and task as the papers do: every rate with the first
seed, then the other seeds at the rate that scored best, so that a base's figure is its own best, over every seed.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
from pathlib import Path

from generate_results import record
from grid_runs import STOPPED_EXIT, Execution, run_once
from recording import REPO_ROOT, Budget, run_complete, run_metrics

FINETUNE_RECIPE = "recipes/finetune.py"
SCRATCH = "scratch"
# Each task: its fine-tuning config, the run length and data, and the metric its learning rate is chosen by.
TASKS: dict[str, tuple[str, list[str], str]] = {
    "conll2003": ("recipes/configs/finetune/conll2003.yaml", ["--num_epochs", "2"], "f1"),
    # 1,000 of SST-2's 67,349 training phrases, drawn with seed 0 (the same for every run), 5 epochs: few labels,
    # where a pretrained encoder should matter most.
    "sst2-1k": ("recipes/configs/finetune/sst2.yaml",
                ["--max_train_samples", "1000", "--train_subset_seed", "0", "--num_epochs", "5"], "accuracy"),
    "sst2": ("recipes/configs/finetune/sst2.yaml", ["--max_train_samples", "null", "--num_epochs", "1"], "accuracy"),
    "rte": ("recipes/configs/finetune/rte.yaml", ["--max_length", "128", "--num_epochs", "6"], "accuracy"),
}  # fmt: skip


def finetune_dir(runs_dir: Path, task: str, base: str, learning_rate: str, seed: int) -> Path:
    return runs_dir / f"{task}-{base}-lr{learning_rate}-seed{seed}"


def best_learning_rate(runs_dir: Path, task: str, base: str, learning_rates: list[str], seed: int) -> str | None:
    """The rate whose run with `seed` scored best on the task's metric; None until every one of them is finished."""
    runs = {rate: finetune_dir(runs_dir, task, base, rate, seed) for rate in learning_rates}
    if not all(run_complete(run) for run in runs.values()):
        return None
    metric = TASKS[task][2]
    return max(learning_rates, key=lambda rate: run_metrics(runs[rate])[metric])


def pretrain(runs_dir: Path, recipe_args: list[str], steps: dict[str, int], budget: Budget) -> int:
    """Each objective's pretraining run, continued if stopped, kept if finished; the number of failed runs, or
    `STOPPED_EXIT` when the budget stopped one."""
    failed = 0
    for objective, max_steps in steps.items():
        run_dir = runs_dir / f"pretrain-{objective}"
        if run_complete(run_dir, "model.safetensors"):
            continue
        code = record(run_dir, [*recipe_args, "--objective", objective, "--max_steps", str(max_steps)], budget)
        if code == STOPPED_EXIT:
            return STOPPED_EXIT
        failed += code != 0
    return failed


def finetune(runs_dir: Path, bases: list[str], tasks: list[str], learning_rates: list[str], seeds: list[int],
             execution: Execution) -> int:  # fmt: skip
    """Every base on every task: each learning rate with the first seed, then the other seeds at the best rate; the
    number of failed runs."""
    failed = 0
    for task in tasks:
        config_file, length, _ = TASKS[task]
        for base in bases:
            pretrained = runs_dir / f"pretrain-{bases[0] if base == SCRATCH else base}"
            method = ["--method", "full", *(["--from_scratch", "true"] if base == SCRATCH else [])]

            def one(rate: str, seed: int) -> int:
                setting = (config_file, [*length, "--learning_rate", rate, "--seed", str(seed)])
                return run_once(finetune_dir(runs_dir, task, base, rate, seed), FINETUNE_RECIPE, pretrained, method,
                                setting, execution=execution)  # fmt: skip

            failed += sum(one(rate, seeds[0]) for rate in learning_rates)
            best = best_learning_rate(runs_dir, task, base, learning_rates, seeds[0])
            if best is not None:
                failed += sum(one(best, seed) for seed in seeds[1:])
    return failed


def _steps(values: list[str]) -> dict[str, int]:
    steps = {}
    for value in values:
        objective, _, count = value.partition("=")
        if not count.isdigit():
            raise SystemExit(f"--steps {value}: expected OBJECTIVE=STEPS, e.g. mlm=6000")
        steps[objective] = int(count)
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("run", help="pretrain with each objective, then fine-tune every base on every task")
    runs.add_argument("runs_dir", type=Path)
    runs.add_argument("--steps", nargs="+", required=True, help="OBJECTIVE=STEPS for each objective, the first one "
                      "also giving the random-weights base its config and tokenizer")  # fmt: skip
    runs.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    runs.add_argument("--learning-rates", nargs="+", default=["1e-4", "3e-4", "1e-3"])
    runs.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    runs.add_argument("--max_minutes", type=float, help="stop after this many minutes (or at SIGTERM), keeping the "
                      "checkpoints of the run it stops; the same command continues")  # fmt: skip
    argv = sys.argv[1:] if argv is None else argv
    own, recipe_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    steps = _steps(args.steps)
    runs_dir = args.runs_dir.resolve()
    os.chdir(REPO_ROOT)  # the recipes' config files and data paths are relative to the repository root
    runs_dir.mkdir(parents=True, exist_ok=True)
    (runs_dir / "command.json").write_text(json.dumps(["python", "model_cards/generate_pretraining_study.py", *argv]))
    execution = Execution(save_every=200, budget=Budget(args.max_minutes))
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, execution.budget.stop)
    failed = pretrain(runs_dir, recipe_args, steps, execution.budget)
    if failed == STOPPED_EXIT:
        return STOPPED_EXIT
    failed += finetune(runs_dir, [*steps, SCRATCH], args.tasks, args.learning_rates, args.seeds, execution)
    if execution.budget.left:
        print(f"stopped by the budget with runs left ({', '.join(execution.budget.left)}): the same command continues")
        return STOPPED_EXIT
    return int(failed > 0)


if __name__ == "__main__":
    sys.exit(main())
