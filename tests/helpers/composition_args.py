"""The command line of a short composition-recipe run on the two adapters of tests/commands/conftest.py's `setup`."""

from __future__ import annotations

from pathlib import Path

SMALL = ["--max_train_samples", "96", "--max_eval_samples", "32", "--max_length", "48", "--per_device_batch_size", "16",
         "--log_every", "1"]  # fmt: skip


def compose_args(setup: dict[str, Path], output_dir: Path, *args: str) -> list:
    """Both adapters composed for the `area` task: 6 steps of 16 examples unless `args` say otherwise."""
    return [
        "--model", setup["base"], "--task", "sequence-classification", "--train_file", setup["train"],
        "--validation_file", setup["validation"], "--adapters", f"module={setup['module']},area={setup['area']}",
        *SMALL, "--max_steps", "6", "--output_dir", output_dir, *args,
    ]  # fmt: skip
