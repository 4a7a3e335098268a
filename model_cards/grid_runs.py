"""The runs of the result grid (`model_cards/generate_finetune_results.py run|compose`), one recorded run at a time:
on which device, with checkpoints to continue a stopped run from, and for how long one invocation may go on
(`recording.Budget`), so that a grid fits calls of limited length (a lent GPU's 10 minutes): each call keeps the
finished runs, continues the stopped one and stops cleanly before its limit; its exit code says whether runs are
left. Also the native BERT checkpoint that the grid's `--native` run starts from."""

from __future__ import annotations

import argparse
import json
import shlex
import shutil
import signal
import sys
from dataclasses import dataclass, field
from pathlib import Path

import torch
from recording import RUN_RECORD, Budget, run_complete, run_recorded, shown

from hfzoo.training.checkpointing import CHECKPOINTS, latest_checkpoint

STOPPED_EXIT = 75  # EX_TEMPFAIL: the budget ran out with runs left; the same command continues them


@dataclass
class Execution:
    """Where and for how long the runs of one invocation train: `device` (the recipe's `--cpu true|false`),
    checkpoints every `save_every` steps (to continue a stopped run; removed once it is finished), and the `budget`
    that stops the invocation, collecting the runs it leaves."""

    device: str = "cpu"
    save_every: int | None = None
    budget: Budget = field(default_factory=Budget)

    def recipe_args(self) -> list[str]:
        saving = ["--save_every", str(self.save_every)] if self.save_every else []
        return ["--cpu", "true" if self.device == "cpu" else "false", *saving]


def native_checkpoint(base: Path, folder: Path) -> Path:
    """A plain transformers BERT folder with the base's shape and tokenizer, random weights (no hfzoo code in it)."""
    from transformers import AutoConfig, AutoTokenizer, BertConfig, BertForMaskedLM

    import hfzoo  # noqa: F401  (registers the base's config class)

    if (folder / "config.json").is_file():
        return folder
    zoo = AutoConfig.from_pretrained(base)
    tokenizer = AutoTokenizer.from_pretrained(base)
    config = BertConfig(
        vocab_size=zoo.vocab_size, hidden_size=zoo.hidden_size, num_hidden_layers=zoo.num_hidden_layers,
        num_attention_heads=zoo.num_attention_heads, intermediate_size=zoo.intermediate_size,
        max_position_embeddings=zoo.max_position_embeddings, pad_token_id=tokenizer.pad_token_id,
    )  # fmt: skip
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def run_once(run_dir: Path, recipe: str, model: Path, extra_args: list[str], setting: tuple[str, list[str]],
             env: dict[str, str] | None = None, execution: Execution | None = None) -> int:  # fmt: skip
    """One recorded run of `recipe` (its config file and run length: `setting`) into `run_dir`, kept if complete
    (`run_complete`), continued from its latest checkpoint if it has one, not started once the budget is spent
    (then, or when the budget stops it, named in `execution.budget.left`); 1 if it failed, else 0."""
    execution = execution or Execution()
    if run_complete(run_dir):
        print(f"{run_dir}: done already, kept")
        return 0
    if execution.budget.spent():
        execution.budget.left.append(run_dir.name)
        return 0
    run_dir.mkdir(parents=True, exist_ok=True)
    config_file, length = setting
    checkpoint = latest_checkpoint(run_dir)
    args = ["--config", config_file, "--model", shown(str(model)), *extra_args, *length, *execution.recipe_args(),
            *(["--resume", "true"] if checkpoint else []), "--output_dir", shown(str(run_dir))]  # fmt: skip
    print(f"{run_dir}: {'continuing from ' + checkpoint.name + ': ' if checkpoint else ''}{recipe} {shlex.join(args)}",
          flush=True)  # fmt: skip
    code = run_recorded(run_dir, recipe, args, env, budget=execution.budget, device=execution.device,
                        resumed=checkpoint is not None)  # fmt: skip
    if code is None:
        print(f"{run_dir}: stopped by the time budget" + ("" if latest_checkpoint(run_dir) else
              ", before its first checkpoint: it starts over next time"), flush=True)  # fmt: skip
        execution.budget.left.append(run_dir.name)
        return 0
    print(f"{run_dir}: exit code {code}", flush=True)
    if code == 0 and execution.save_every:  # the checkpoints only served to continue it; the model is in run_dir
        shutil.rmtree(run_dir / CHECKPOINTS, ignore_errors=True)
    return int(code != 0)


def add_execution_flags(parser: argparse.ArgumentParser) -> None:
    """`--device`, `--save_every` and `--max_minutes`, of `run` and `compose` alike."""
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where every run trains (the "
                        "recipe's --cpu true|false); named in the records and the card")
    parser.add_argument("--save_every", type=int, help="checkpoint each run every N steps, so that a run stopped by "
                        "--max_minutes continues from there (the checkpoints of a finished run are removed)")
    parser.add_argument("--max_minutes", type=float, help="stop after this many minutes, terminating a run still "
                        "going; the same command continues (exit code 75 while runs are left)")


def execution_of(args: argparse.Namespace, runs_dir: Path) -> Execution:
    """The invocation's `Execution` from its flags, once its device is checked (`check_runs_device`); SIGTERM and
    Ctrl-C stop it as its budget does, keeping the checkpoints of the run they interrupt."""
    check_runs_device(runs_dir, args.device)
    execution = Execution(args.device, args.save_every, Budget(args.max_minutes))
    for stop in (signal.SIGTERM, signal.SIGINT):
        signal.signal(stop, execution.budget.stop)
    return execution


def check_runs_device(runs_dir: Path, device: str) -> None:
    """Refuse, before any run, a `device` other than the one the runs in `runs_dir` trained on (records without a
    device are CPU runs): a card is of one device, and a checkpoint resumes only on its own (the recipe's `cpu`)."""
    if device == "cuda" and not torch.cuda.is_available():
        sys.exit("generate_finetune_results.py: --device cuda: torch sees no CUDA device here "
                 f"(torch {torch.__version__}); run on a GPU machine or give --device cpu")  # fmt: skip
    for record_file in sorted(runs_dir.glob(f"*/{RUN_RECORD}")):
        recorded = json.loads(record_file.read_text()).get("device", "(cpu)")
        if not recorded.endswith(f"({device})"):
            sys.exit(f"generate_finetune_results.py: --device {device}: {record_file.parent.name} ran on {recorded}; "
                     f"runs on {device} go into another folder")  # fmt: skip


def exit_code(failed: int, execution: Execution) -> int:
    """1 if a run failed, `STOPPED_EXIT` if the budget left runs (named), else 0."""
    left = execution.budget.left
    if left:
        print(f"stopped by the budget with {len(left)} runs left ({', '.join(left)}): the same command continues them")
    return 1 if failed else STOPPED_EXIT if left else 0
