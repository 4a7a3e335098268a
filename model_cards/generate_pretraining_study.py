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

    # First, the tokenizer every run shares (`--tokenizer`), trained as the recipe trains one when it is given none
    # (the config's tokenizer_kind and vocab_size, on its training texts), with its command and files' SHA-256 in
    # tokenizer_record.json, which the card shows: the same command rebuilds it, byte for byte.
    python model_cards/generate_pretraining_study.py tokenizer runs/results/pretraining-enwiki/tokenizer \
        -- --config recipes/configs/bert-small-enwiki-mlm.yaml

    # The card (README.md, the validation curves, results.json), from whatever runs are finished: every target's
    # verdict, or what it still waits for. Each finished run's records (no weights) are kept in the card's
    # `run_records/` first, and the card is made from them alone: it gathers the runs of every session and machine,
    # and regenerates where the run folders are gone.
    python model_cards/generate_pretraining_study.py card runs/results/pretraining-enwiki \
        model_cards/results/pretraining-enwiki-4x256

    # Equal compute, counted: each objective's training FLOPs per step (forward and backward of the recipe's own model
    # on a batch of the corpus, torch's FlopCounterMode) into the runs folder, and the steps that match the first
    # objective's compute; the card states every run's total.
    python model_cards/generate_pretraining_study.py flops runs/results/pretraining-enwiki --steps mlm=6000 \
        --objectives spanbert electra -- --config recipes/configs/bert-small-enwiki-mlm.yaml \
        --tokenizer runs/results/pretraining-enwiki/tokenizer

    # An objective added later, beside the runs a card already archived (`--tokenizer`: the study's own): only its
    # pretraining and its fine-tuning, the random-weights base's runs kept as they are. A base named OBJECTIVE.LABEL
    # is that objective run again with other settings (here ELECTRA at a 20x lower peak learning rate, in its own runs
    # folder), beside the base of the same objective; each is its own row of the card. `--bases` fine-tunes only
    # the bases it names: `--tasks sst2 --bases scratch` adds a task's random-weights runs to such a folder.
    python model_cards/generate_pretraining_study.py run runs/results/pretraining-enwiki --steps electra=5538 \
        --tasks conll2003 sst2-1k --without_scratch -- --config recipes/configs/bert-small-enwiki-mlm.yaml \
        --tokenizer runs/results/pretraining-enwiki/tokenizer
    python model_cards/generate_pretraining_study.py run runs/results/pretraining-enwiki-electra-lr5e-5 \
        --steps electra.lr5e_5=5538 --tasks conll2003 sst2-1k --without_scratch -- \
        --config recipes/configs/bert-small-enwiki-mlm.yaml --tokenizer runs/results/pretraining-enwiki/tokenizer \
        --mixed_precision bf16 --learning_rate 5e-5 --warmup_steps 300 --adam_beta2 0.999

Run folders: `pretrain-<objective>`, then `<task>-<base>-lr<rate>-seed<seed>` for every base (each objective, and
`scratch`: the first objective's config and tokenizer with random weights, the floor that shows whether pretraining
transferred). The fine-tuning learning rate is chosen per base and task as the papers do: every rate with the first
seed, then the other seeds at the rate that scored best, so that a base's figure is its own best, over every seed.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import signal
import sys
from dataclasses import replace
from pathlib import Path

from generate_results import record
from grid_runs import STOPPED_EXIT, Execution, check_runs_device, run_once
from pretraining_study_card import (
    BASE_NAME,
    SCRATCH,
    STEP_FLOPS,
    TASKS,
    TOKENIZER_RECORD,
    add_study_commands,
    card,
    objective_of,
    tokenizer_files,
)
from recording import REPO_ROOT, Budget, run_complete, run_metrics, shown

import torch
from torch.utils.flop_counter import FlopCounterMode
from transformers import AutoTokenizer

from hfzoo.commands.pretrain import corpus_texts, parse_args, train_run_tokenizer
from hfzoo.core.files import write_atomic
from hfzoo.core.presets import preset_config
from hfzoo.data.streaming import held_out
from hfzoo.objectives import get_objective

FINETUNE_RECIPE = "recipes/finetune.py"

def finetune_dir(runs_dir: Path, task: str, base: str, learning_rate: str, seed: int) -> Path:
    return runs_dir / f"{task}-{base}-lr{learning_rate}-seed{seed}"


def best_learning_rate(runs_dir: Path, task: str, base: str, learning_rates: list[str], seed: int) -> str | None:
    """The rate whose run with `seed` scored best on the task's metric; None until every one of them is finished."""
    runs = {rate: finetune_dir(runs_dir, task, base, rate, seed) for rate in learning_rates}
    if not all(run_complete(run) for run in runs.values()):
        return None
    metric = TASKS[task][2]
    return max(learning_rates, key=lambda rate: run_metrics(runs[rate])[metric])


def pretrain(runs_dir: Path, recipe_args: list[str], steps: dict[str, int], execution: Execution) -> int:
    """Each objective's pretraining run, continued if stopped, kept if finished; the number of failed runs, or
    `STOPPED_EXIT` when the budget stopped one."""
    failed = 0
    for objective, max_steps in steps.items():
        run_dir = runs_dir / f"pretrain-{objective}"
        if run_complete(run_dir, "model.safetensors"):
            continue
        # on a CPU the recipe's default device is it: a run started without `--cpu` resumes (the key is not resumable)
        device = ["--cpu", "false"] if execution.device == "cuda" else []
        args = [*recipe_args, "--objective", objective_of(objective), "--max_steps", str(max_steps), *device]
        code = record(run_dir, args, execution.budget, execution.device)
        if code == STOPPED_EXIT:
            return STOPPED_EXIT
        failed += code != 0
    return failed


def finetune(runs_dir: Path, bases: list[str], first: str, tasks: list[str], learning_rates: list[str],
             seeds: list[int], execution: Execution, finetune_args: list[str]) -> int:  # fmt: skip
    """Every base whose pretraining finished on every task: each learning rate with the first seed, then the other
    seeds at the best rate, with `finetune_args` after the task's own settings (e.g. `--mixed_precision bf16`); the
    random-weights base takes the config and tokenizer of the `first` objective's run. The number of failed runs."""
    failed = 0
    for task in tasks:
        config_file, length, _ = TASKS[task]
        for base in bases:
            pretrained = runs_dir / f"pretrain-{first if base == SCRATCH else base}"
            if not run_complete(pretrained, "model.safetensors"):
                continue  # its pretraining failed (counted) or was stopped: nothing to start from yet
            method = ["--method", "full", *(["--from_scratch", "true"] if base == SCRATCH else [])]

            def one(rate: str, seed: int) -> int:
                setting = (config_file, [*length, "--learning_rate", rate, "--seed", str(seed), *finetune_args])
                return run_once(finetune_dir(runs_dir, task, base, rate, seed), FINETUNE_RECIPE, pretrained, method,
                                setting, execution=execution)  # fmt: skip

            failed += sum(one(rate, seeds[0]) for rate in learning_rates)
            best = best_learning_rate(runs_dir, task, base, learning_rates, seeds[0])
            if best is not None:
                failed += sum(one(best, seed) for seed in seeds[1:])
    return failed


def make_tokenizer(folder: Path, recipe_args: list[str], command: list[str]) -> None:
    """The study's shared tokenizer in `folder`, trained as a pretraining run with `recipe_args` trains its own when it
    is given none, and `TOKENIZER_RECORD` beside it; written under another name first, so that a stopped training
    leaves no folder that looks made. An existing folder is refused: the study's runs may already read it."""
    if folder.exists():
        raise SystemExit(f"tokenizer: {shown(str(folder))} exists; a study's runs share one tokenizer (remove the "
                         "folder to train another, with every run that read it)")  # fmt: skip
    config = parse_args(recipe_args)
    if config.data.tokenizer:
        raise SystemExit("tokenizer: the recipe arguments name a --tokenizer; give the config it is trained from")
    staging = folder.with_name(folder.name + ".partial")
    shutil.rmtree(staging, ignore_errors=True)
    train_run_tokenizer(config).save_pretrained(staging)
    record = {"command": command, "files": tokenizer_files(staging)}
    write_atomic(staging / TOKENIZER_RECORD, json.dumps(record, indent=1) + "\n")
    staging.rename(folder)


def step_flops(recipe_args: list[str], objectives: list[str], texts: int = 64) -> dict[str, float]:
    """Each objective's training FLOPs per optimizer step: one forward and backward of the model the recipe trains
    (random weights, its config, tokenizer and collator) on a batch of blocks of the corpus's first `texts` training
    texts, counted by torch's FlopCounterMode. The corpus and tokenizer are the recipe's, read once: only the model, the
    collator and the blocks differ by objective. A masked objective's count depends on the masks drawn: the batch is
    the same for every objective and its masks come from one seed."""
    recipe = parse_args([*recipe_args, "--objective", objectives[0]])
    first = recipe.data
    if not first.tokenizer:
        raise SystemExit("flops: pass the study's --tokenizer, so every objective is counted with its vocabulary")
    train_texts, _ = corpus_texts(replace(first, streaming=True), recipe.run.seed)
    texts, tokenizer = held_out(train_texts, texts), AutoTokenizer.from_pretrained(first.tokenizer)
    flops = {}
    for name in objectives:
        config = parse_args([*recipe_args, "--objective", name])
        objective = get_objective(name, config.preset)
        blocks = objective.examples(texts, tokenizer, config.data.block_size)
        model_config = preset_config(config.preset, vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                     **config.model)  # fmt: skip
        torch.manual_seed(config.run.seed)
        model = objective.build_model(model_config, config.objective_options).train()
        collator = objective.make_collator(tokenizer, config.collator, torch.Generator().manual_seed(config.run.seed))
        batch = collator([blocks[i] for i in range(config.training.per_device_batch_size)])
        with FlopCounterMode(display=False) as counter:
            model(**batch).loss.backward()
        flops[name] = float(counter.get_total_flops())
    return flops


def _steps(values: list[str]) -> dict[str, int]:
    steps = {}
    for value in values:
        objective, _, count = value.partition("=")
        if not count.isdigit() or not BASE_NAME.fullmatch(objective):
            raise SystemExit(f"--steps {value}: expected OBJECTIVE=STEPS or OBJECTIVE.LABEL=STEPS (the label in "
                             "lower-case letters, digits and _), e.g. mlm=6000 or electra.lr5e_5=5538")
        steps[objective] = int(count)
    return steps


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("run", help="pretrain with each objective, then fine-tune every base on every task")
    runs.add_argument("runs_dir", type=Path)
    runs.add_argument("--steps", nargs="+", required=True, help="OBJECTIVE=STEPS for each objective (OBJECTIVE.LABEL "
                      "for another run of one), the first also giving the random-weights base its config and "
                      "tokenizer")  # fmt: skip
    runs.add_argument("--tasks", nargs="+", choices=list(TASKS), default=list(TASKS))
    runs.add_argument("--learning-rates", nargs="+", default=["1e-4", "3e-4", "1e-3"])
    runs.add_argument("--seeds", nargs="+", type=int, default=[42, 43, 44])
    runs.add_argument("--max_minutes", type=float, help="stop after this many minutes (or at SIGTERM), keeping the "
                      "checkpoints of the run it stops; the same command continues")  # fmt: skip
    runs.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where every run trains (the recipes' "
                      "--cpu true|false); named in the records")  # fmt: skip
    which = runs.add_mutually_exclusive_group()
    which.add_argument("--without_scratch", action="store_true", help="fine-tune only the pretrained bases: for an "
                       "objective added to a study whose random-weights runs are already archived in its card")
    which.add_argument("--bases", nargs="+", help="fine-tune only these bases (objectives of --steps, or scratch), "
                       "e.g. `--bases scratch` for the random-weights runs of a task added later")  # fmt: skip
    runs.add_argument("--finetune_args", default="", help="recipe arguments added to every fine-tuning run after the "
                      "task's own, e.g. '--mixed_precision bf16'")  # fmt: skip
    count = commands.add_parser("flops", help="each objective's training FLOPs per step, and the steps of equal "
                                "compute")  # fmt: skip
    count.add_argument("runs_dir", type=Path)
    count.add_argument("--steps", required=True, help="REFERENCE=STEPS: the objective and run length to match")
    count.add_argument("--objectives", nargs="+", required=True, help="the objectives to give equal compute")
    shared = commands.add_parser("tokenizer", help="train the tokenizer the runs share (--tokenizer), as the recipe "
                                 "trains one, from the recipe arguments after `--`")  # fmt: skip
    shared.add_argument("folder", type=Path)
    make = commands.add_parser("card", help="README.md, curves and results.json from the finished runs")
    make.add_argument("runs_dir", type=Path)
    make.add_argument("card_dir", type=Path)
    argv = sys.argv[1:] if argv is None else argv
    own, recipe_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)
    if args.command == "tokenizer":
        folder = args.folder.resolve()
        os.chdir(REPO_ROOT)
        make_tokenizer(folder, recipe_args, ["python", "model_cards/generate_pretraining_study.py", *argv])
        print(f"wrote {shown(str(folder))}")
        return 0
    runs_dir = args.runs_dir.resolve()
    if args.command == "card":
        card_dir = args.card_dir.resolve()
        os.chdir(REPO_ROOT)
        print(card(runs_dir, card_dir))
        return 0
    if args.command == "flops":
        os.chdir(REPO_ROOT)
        ((reference, reference_steps),) = _steps([args.steps]).items()
        flops = step_flops(recipe_args, [reference, *args.objectives])
        write_atomic(runs_dir / STEP_FLOPS, json.dumps(flops, indent=1) + "\n")
        for objective, count in flops.items():
            print(f"{objective}: {count:.4g} FLOPs per step; equal compute to {reference}={reference_steps}: "
                  f"{objective}={round(reference_steps * flops[reference] / count)}")
        return 0
    steps = _steps(args.steps)
    bases = [*steps, *([] if args.without_scratch else [SCRATCH])]
    if args.bases:
        if unknown := sorted(set(args.bases) - set(bases)):
            raise SystemExit(f"--bases {' '.join(unknown)}: not a base of this study ({', '.join(bases)})")
        bases = [base for base in bases if base in args.bases]
    check_runs_device(runs_dir, args.device)  # a GPU torch sees, and one device per runs folder
    os.chdir(REPO_ROOT)  # the recipes' config files and data paths are relative to the repository root
    runs_dir.mkdir(parents=True, exist_ok=True)
    add_study_commands(runs_dir, [["python", "model_cards/generate_pretraining_study.py", *argv]])
    execution = Execution(args.device, save_every=200, budget=Budget(args.max_minutes))
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, execution.budget.stop)
    failed = pretrain(runs_dir, recipe_args, steps, execution)
    if failed == STOPPED_EXIT:
        return STOPPED_EXIT
    failed += finetune(runs_dir, bases, next(iter(steps)), args.tasks, args.learning_rates, args.seeds, execution,
                       shlex.split(args.finetune_args))
    if execution.budget.left:
        print(f"stopped by the budget with runs left ({', '.join(execution.budget.left)}): the same command continues")
        return STOPPED_EXIT
    return int(failed > 0)


if __name__ == "__main__":
    sys.exit(main())
