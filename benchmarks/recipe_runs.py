"""Benchmarks that run the pretraining recipe as users do (`bench_shakespeare`, `bench_mlm_pretraining`): its
command line, and what its log says."""

import bisect
import json
import sys
from pathlib import Path

from common import REPO_ROOT

from hfzoo.training.logging import read_log


def recipe_command(settings: dict, data_dir: Path, output_dir: Path) -> list[str]:
    """`recipes/pretrain.py` with `settings` (recipe config keys; a dict value, such as `model`, as YAML) on the
    corpus folder `data_dir`, checkpointing only at its last step."""
    overrides = [part for key, value in settings.items()
                 for part in (f"--{key}", json.dumps(value) if isinstance(value, dict) else str(value))]  # fmt: skip
    return [sys.executable, str(REPO_ROOT / "recipes" / "pretrain.py"), *overrides, "--dataset", str(data_dir),
            "--save_every", str(settings["max_steps"]), "--output_dir", str(output_dir)]  # fmt: skip


def elapsed_at(logged: list[tuple[int, float]], step: int) -> float | None:
    """The training seconds at `step`, from the (step, elapsed) pairs the log's training records give: exact at a
    logged step, linear between the two logged around it (an evaluation between two logging steps), None before
    the first or after the last."""
    index = bisect.bisect_left(logged, (step,))
    if index < len(logged) and logged[index][0] == step:
        return logged[index][1]
    if index == 0 or index == len(logged):
        return None
    (before, start), (after, end) = logged[index - 1], logged[index]
    return start + (end - start) * (step - before) / (after - before)


def read_run(output_dir: Path) -> dict:
    """What a recipe run's `log.jsonl` says: the final validation loss, the training seconds, the parameter count, the
    number of training blocks and the curve (step, training seconds, validation loss)."""
    records = read_log(output_dir)
    end = next(r for r in records if r["event"] == "end")
    # Training starts at step 0, second 0, and the end record times the last step: an evaluation before the first
    # logging step or after the last one is placed too.
    logged = [(0, 0.0), *((r["step"], r["elapsed"]) for r in records if r["event"] == "train")]
    if logged[-1][0] < end["step"]:
        logged.append((end["step"], end["elapsed"]))
    curve = [
        {"step": r["step"], "train_s": elapsed_at(logged, r["step"]), "validation_loss": r["eval_loss"]}
        for r in records if r["event"] == "eval"
    ]  # fmt: skip
    tokens_per_s = [r["tokens_per_s"] for r in records if r["event"] == "train"]
    return {
        "validation_loss": curve[-1]["validation_loss"], "train_s": end["elapsed"], "steps": end["step"],
        "tokens_per_s_median": sorted(tokens_per_s)[len(tokens_per_s) // 2], "parameters": records[0]["parameters"],
        "train_blocks": records[0]["train_blocks"], "curve": curve,
    }  # fmt: skip
