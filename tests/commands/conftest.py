"""Fixtures of the recipe tests.

`setup`: two real task adapters trained with the fine-tuning recipe on a tiny bert-tiny checkpoint (wordpiece
tokenizer trained on the task's own docstrings), which the composition recipe's tests compose: LoRA on the stdlib
`module` task (on qkv_proj and down_proj) and a Pfeiffer bottleneck on the `area` task (down_proj), so the four
down_proj modules carry both, and the four qkv_proj modules weigh the LoRA against the base output.
"""

from __future__ import annotations

import csv
from pathlib import Path

import pytest
import torch
from tests.helpers.composition_args import SMALL
from tests.helpers.recipe_runs import run_recipe
from transformers import AutoModelForMaskedLM

import hfzoo
from hfzoo.commands import finetune
from hfzoo.data.stdlib_tasks import write_task_files
from hfzoo.data.tokenizer_training import train_tokenizer


@pytest.fixture(scope="module")
def setup(tmp_path_factory) -> dict[str, Path]:
    """The task files, a random-init bert-tiny MLM checkpoint with its tokenizer, and two trained adapters."""
    root = tmp_path_factory.mktemp("compose-recipe")
    files = {task: write_task_files(task, root / "data" / task) for task in ("module", "area")}
    with open(files["area"]["train"], newline="", encoding="utf-8") as handle:
        texts = [row["text"] for row in csv.DictReader(handle)][:1500]
    tokenizer = train_tokenizer(texts, "wordpiece", 1000, "encoder")
    config = hfzoo.preset_config("bert-tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                 hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(config).save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    adapters = {
        "module": ["--method", "lora", "--method_options.target_modules", "[qkv_proj, down_proj]"],
        "area": ["--method", "bottleneck"],
    }
    paths = {"base": root / "base", "root": root}
    for task, method in adapters.items():
        paths[task] = run_recipe(
            finetune.main, "--model", root / "base", "--task", "sequence-classification", "--train_file",
            files[task]["train"], "--validation_file", files[task]["validation"], *method, *SMALL, "--max_steps", "12",
            "--learning_rate", "3e-3", "--output_dir", root / f"adapter-{task}",
        )  # fmt: skip
    paths["train"], paths["validation"] = files["area"]["train"], files["area"]["validation"]
    return paths
