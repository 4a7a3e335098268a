"""The pretraining study on a lent GPU (issue 35 item 6): the masked LM of `recipes/configs/bert-small-enwiki-mlm.yaml`
pretrained in bf16 for about 8 minutes, then it and the same encoder from random weights fine-tuned on CoNLL-2003 and
SST-2-1k (`generate_pretraining_study.py run`), and the card of those runs, its device named in every record.

How many steps make 8 minutes is measured, not guessed: a 60-step calibration run on the same GPU gives the median
tokens/s, and the study's run gets the steps that many tokens/s fill in the budget.

    python model_cards/gpu_pretraining_study.py                    # on a GPU: ~8 min of pretraining, then fine-tuning
    python model_cards/gpu_pretraining_study.py --tiny runs/tiny   # here, on the CPU, at a tiny size (its test)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import generate_pretraining_study as study
from generate_results import record
from recording import REPO_ROOT, Budget, run_complete, shown

from hfzoo.training.logging import steps_filling

CONFIG = "recipes/configs/bert-small-enwiki-mlm.yaml"
# A GPU step of 32 blocks would leave it idle between kernels: 128 blocks a step, the schedule's other settings kept.
GPU_PRETRAINING = ["--config", CONFIG, "--per_device_batch_size", "128", "--mixed_precision", "bf16", "--eval_every",
                   "500", "--save_every", "500"]  # fmt: skip
TINY_PRETRAINING = ["--config", CONFIG, "--model.hidden_size", "64", "--model.intermediate_size", "128", "--dataset",
                    "../shared/data/enwiki/AA/wiki_00", "--exclude_titles", "null", "--vocab_size", "384",
                    "--max_train_samples", "20", "--max_eval_samples", "4", "--block_size", "32",
                    "--per_device_batch_size", "4", "--eval_every", "2", "--log_every", "1", "--tensorboard", "false"]
TINY_FINETUNING = "--max_steps 2 --per_device_batch_size 8 --max_train_samples 32 --max_eval_samples 16"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", type=Path, nargs="?", default=REPO_ROOT / "runs/results/pretraining-enwiki-gpu")
    parser.add_argument("--card_dir", type=Path, help="default: model_cards/results/<the runs folder's name>")
    parser.add_argument("--minutes", type=float, default=8.0, help="the pretraining budget (--tiny: a few seconds)")
    parser.add_argument("--max_minutes", type=float, default=13.0, help="stop the runs after this many minutes (a "
                        "GPU loan's length), keeping checkpoints: the same command continues them; the card is "
                        "written from the finished runs either way")  # fmt: skip
    parser.add_argument("--tiny", action="store_true", help="on the CPU at a tiny size: the script's own test")
    args = parser.parse_args(argv)
    if args.tiny and args.minutes == parser.get_default("minutes"):
        args.minutes = 0.05
    runs_dir = args.runs_dir.resolve()
    card_dir = (args.card_dir or REPO_ROOT / "model_cards" / "results" / runs_dir.name).resolve()
    device, pretraining = ("cpu", TINY_PRETRAINING) if args.tiny else ("cuda", GPU_PRETRAINING)
    calibration = runs_dir / "calibration"
    budget = Budget(args.max_minutes)
    if not run_complete(calibration, "model.safetensors"):  # a stopped or failed calibration is run again
        device_args = [] if args.tiny else ["--cpu", "false"]
        steps = "3" if args.tiny else "60"
        code = record(calibration, [*pretraining, *device_args, "--objective", "mlm", "--max_steps", steps,
                                    "--eval_every", steps, "--log_every", "1"], budget, device)  # fmt: skip
        if code != 0:
            return code
    steps = steps_filling(args.minutes, calibration)
    print(f"pretraining for {steps} steps ({args.minutes:g} minutes at the calibration's speed)", flush=True)
    finetune_args = TINY_FINETUNING if args.tiny else "--mixed_precision bf16"
    shrink = ["--learning-rates", "1e-3", "--seeds", "42"] if args.tiny else []
    left = max(budget.minutes - (time.monotonic() - budget.started) / 60, 0.1)
    code = study.main(["run", shown(str(runs_dir)), "--steps", f"mlm={steps}", "--tasks", "conll2003", "sst2-1k",
                       "--device", device, "--finetune_args", finetune_args, *shrink, "--max_minutes", f"{left:.2f}",
                       "--", *pretraining])  # fmt: skip
    if (runs_dir / "pretrain-mlm" / "model.safetensors").is_file():  # a card of what finished, even when stopped
        study.main(["card", shown(str(runs_dir)), shown(str(card_dir))])
    return code


if __name__ == "__main__":
    sys.exit(main())
