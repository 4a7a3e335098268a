"""Fine-tuning with LoRA (through PEFT) sharded with FSDP2 on two real CPU processes (torchrun, gloo).

The 2-process sharded run (4 examples per process) must follow a one-process unsharded run of the same global batch
(8 examples): the same loss at every step and the same trained adapter and head, up to the order of float sums. A
bert-tiny without dropout (so both runs draw nothing at random) on the stdlib `area` task.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file
from tests.helpers.recipe_runs import in_one_thread, launch, on_two_processes
from transformers import AutoModelForMaskedLM, AutoModelForSequenceClassification

import hfzoo
from hfzoo.commands.finetune import main
from hfzoo.data.stdlib_tasks import write_task_files
from hfzoo.data.tokenizer_training import train_tokenizer
from hfzoo.training import list_checkpoints
from hfzoo.training.logging import read_log

RECIPE = Path(__file__).resolve().parents[2] / "recipes" / "finetune.py"


@pytest.fixture(scope="module")
def base(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("fsdp-finetune")
    files = write_task_files("area", root / "data")
    tokenizer = train_tokenizer(files["train"].read_text(encoding="utf-8").splitlines()[1:1500], "wordpiece", 1000,
                                "encoder")  # fmt: skip
    config = hfzoo.preset_config("bert-tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                 hidden_dropout=0.0, attention_dropout=0.0)  # fmt: skip
    torch.manual_seed(0)
    AutoModelForMaskedLM.from_config(config).save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    return {"base": root / "base", "train": files["train"], "validation": files["validation"]}


def args(base: dict[str, Path], output_dir: Path, per_device_batch_size: int, sharding: str) -> list[str]:
    """6 steps of LoRA on 64 examples, a checkpoint every 2."""
    return [
        "--model", str(base["base"]), "--task", "sequence-classification", "--train_file", str(base["train"]),
        "--validation_file", str(base["validation"]), "--max_train_samples", "64", "--max_eval_samples", "32",
        "--max_length", "48", "--per_device_batch_size", str(per_device_batch_size), "--max_steps", "6",
        "--log_every", "1", "--save_every", "2", "--eval_every", "6", "--learning_rate", "2e-3", "--method", "lora",
        "--sharding", sharding, "--output_dir", str(output_dir),
        "--group_by_length", "false",  # a plain shuffle: batches grouped by length differ between 2 x 4 and 8
    ]  # fmt: skip


def test_lora_sharded_on_two_processes_follows_one_unsharded_process(base, tmp_path):
    sharded = tmp_path / "sharded"
    launch(on_two_processes(RECIPE, *args(base, sharded, 4, "fsdp")))
    single = in_one_thread(main, *args(base, tmp_path / "single", 8, "none"))

    start = next(r for r in read_log(sharded) if r["event"] == "start")
    assert (start["num_processes"], start["sharded"]) == (2, True)
    assert sorted(p.name for p in (list_checkpoints(sharded)[-1] / "state").iterdir()) == [
        f"shard-0000{rank}-model-00001-of-00001.safetensors" for rank in (1, 2)
    ]
    losses = [{r["step"]: r["loss"] for r in read_log(run) if r["event"] == "train"} for run in (sharded, single)]
    assert list(losses[0]) == list(losses[1]) == list(range(1, 7))
    for step in losses[0]:  # float sums in another order move the loss by ~1e-6; one different example by > 1e-2
        assert losses[0][step] == pytest.approx(losses[1][step], abs=1e-4), step
    adapters = [load_file(run / "adapter_model.safetensors") for run in (sharded, single)]
    assert adapters[0].keys() == adapters[1].keys()
    assert max((adapters[0][k] - adapters[1][k]).abs().max().item() for k in adapters[0]) < 1e-4
    model = AutoModelForSequenceClassification.from_pretrained(base["base"], num_labels=6)
    assert isinstance(PeftModel.from_pretrained(model, sharded), PeftModel)  # plain PEFT loads the sharded run's
