"""The stdlib `area` task on a random bert-tiny: a base checkpoint, the arguments of a short fine-tuning run of it,
and a finished 4-step LoRA run, which the resume tests of recipes/ and training/ and the run-record tests share."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from tests.helpers.recipe_runs import run_finetune
from transformers import AutoModelForMaskedLM

import hfzoo
from hfzoo.data.stdlib_tasks import write_task_files
from hfzoo.data.tokenizer_training import train_tokenizer

MAX_STEPS = 16


def _save_base(root: Path, tokenizer_lines: int, vocab_size: int) -> dict[str, Path]:
    files = write_task_files("area", root / "data")
    texts = files["train"].read_text(encoding="utf-8").splitlines()[1:tokenizer_lines]
    tokenizer = train_tokenizer(texts, "wordpiece", vocab_size, "encoder")
    config = hfzoo.preset_config("bert-tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(config).save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    return {"base": root / "base", "train": files["train"], "validation": files["validation"]}


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Path]:
    """The `area` task files and a random-init bert-tiny masked LM with a wordpiece tokenizer trained on them."""
    return _save_base(tmp_path_factory.mktemp("finetune-resume"), 1500, 1000)


def finetune_args(base: dict[str, Path], output_dir: Path, method: str, *extra: str) -> list[str]:
    """A 16-step run over 2 epochs of 64 examples (shuffled, dropout 0.1), checkpoints every 3 steps."""
    return [
        "--model", str(base["base"]), "--task", "sequence-classification", "--train_file", str(base["train"]),
        "--validation_file", str(base["validation"]), "--max_train_samples", "64", "--max_eval_samples", "32",
        "--max_length", "48", "--per_device_batch_size", "8", "--max_steps", str(MAX_STEPS), "--log_every", "1",
        "--save_every", "3", "--eval_every", "4", "--save_best", "true", "--learning_rate", "2e-3",
        "--method", method, "--output_dir", str(output_dir), *extra,
    ]  # fmt: skip


def short_lora_args(base: dict[str, Path], out: Path, *extra: str) -> list[str]:
    """A 4-step LoRA run with checkpoints at steps 2 and 4."""
    return [*finetune_args(base, out, "lora"), "--max_steps", "4", "--save_every", "2", "--save_best", "false",
            "--eval_every", "4", *extra]  # fmt: skip


@pytest.fixture
def finetuned(tmp_path) -> tuple[dict[str, Path], Path]:
    """(the `area` data and a bert-tiny base, a 4-step LoRA fine-tuning of it with checkpoints at steps 2 and 4)."""
    base = _save_base(tmp_path, 800, 600)
    return base, run_finetune(*short_lora_args(base, tmp_path / "run"))
