"""ULMFiT's fine-tuning options (issue 18 item 4): the slanted triangular schedule and the learning rate per layer
group that the optimizer actually applies, layer groups found on hfzoo, native and PEFT-wrapped models, gradual
unfreezing (frozen groups bit-identical until their step), and the fine-tuning recipe with all three options, which
trains and resumes exactly from a checkpoint taken mid-unfreezing.
"""

from __future__ import annotations

import math
import shutil
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model
from tests.helpers.recipe_runs import run_finetune as run
from tests.helpers.run_outputs import assert_same_tensors, train_losses
from tests.helpers.schedules import PEAK, applied_learning_rates
from transformers import AutoModelForSequenceClassification, BertConfig, BertForSequenceClassification

import hfzoo
from hfzoo.commands.finetune import parse_args
from hfzoo.training import list_checkpoints
from hfzoo.training.logging import read_log
from hfzoo.training.loop import build_optimizer, build_slanted_triangular_scheduler
from hfzoo.training.ulmfit import GradualUnfreezing, discriminative_learning_rates, layer_groups


def hfzoo_bert() -> torch.nn.Module:
    torch.manual_seed(0)
    return AutoModelForSequenceClassification.from_config(hfzoo.preset_config("bert-tiny", num_labels=3))


def native_bert() -> BertForSequenceClassification:
    torch.manual_seed(0)
    config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=3, num_attention_heads=2,
                        intermediate_size=64, max_position_embeddings=64, num_labels=3)  # fmt: skip
    return BertForSequenceClassification(config)


def stlr(step: int, steps: int, cut_frac: float, ratio: float) -> float:
    """ULMFiT's eq. 3, written out as in the paper."""
    cut = math.floor(steps * cut_frac)
    p = step / cut if step < cut else 1 - (step - cut) / (cut * (1 / cut_frac - 1))
    return PEAK * (1 + p * (ratio - 1)) / ratio


def test_the_applied_learning_rate_follows_the_slanted_triangular_formula():
    steps, cut_frac, ratio = 40, 0.1, 32.0
    *applied, after = applied_learning_rates(
        lambda optimizer: build_slanted_triangular_scheduler(optimizer, steps, cut_frac, ratio), steps + 1
    )
    assert applied == pytest.approx([stlr(t, steps, cut_frac, ratio) for t in range(steps)], rel=1e-12)
    assert applied[0] == pytest.approx(PEAK / ratio) and max(applied) == applied[4] == pytest.approx(PEAK)
    assert all(a < b for a, b in zip(applied[:4], applied[1:5]))  # short linear increase
    assert all(a > b for a, b in zip(applied[4:], applied[5:]))  # long linear decay
    assert after == pytest.approx(PEAK / ratio)  # after the last step: back to 1/ratio


@pytest.mark.parametrize("make_model, blocks", [(hfzoo_bert, 4), (native_bert, 3)], ids=["hfzoo", "native"])
def test_each_layer_group_gets_its_discriminative_learning_rate(make_model, blocks):
    model, decay = make_model(), 2.6
    groups = layer_groups(model)
    names = {id(p): name for name, p in model.named_parameters()}
    assert len(groups) == blocks + 2  # head, each block, embeddings
    assert any(names[id(p)].startswith("classifier.") for p in groups[0])
    assert any("embed" in names[id(p)] for p in groups[-1])
    assert all(".layers.3." in names[id(p)] or ".layer.2." in names[id(p)] for p in groups[1])  # top block
    optimizer = build_optimizer(model, PEAK, 0.01, (0.9, 0.999), 1e-8,
                                discriminative_learning_rates(groups, PEAK, decay))  # fmt: skip
    scheduler = build_slanted_triangular_scheduler(optimizer, 20, 0.2, 8.0)
    for _ in range(3):
        optimizer.step()
        scheduler.step()
    depth_of = {id(p): depth for depth, params in enumerate(groups) for p in params}
    factor = (1 + 3 / 4 * 7) / 8  # 3 of the 4 rising steps
    for group in optimizer.param_groups:
        depths = {depth_of[id(p)] for p in group["params"]}
        assert len(depths) == 1
        assert group["lr"] == pytest.approx(PEAK / decay ** depths.pop() * factor, rel=1e-12)
    trained = {id(p) for group in optimizer.param_groups for p in group["params"]}
    assert trained == {id(p) for p in model.parameters()}


def test_layer_groups_of_a_peft_model_keep_the_method_frozen():
    model = get_peft_model(native_bert(), LoraConfig(task_type="SEQ_CLS", target_modules=["query", "value"]))
    groups = layer_groups(model)
    assert [sum(p.requires_grad for p in group) for group in groups] == [2, 4, 4, 4, 0]  # head, 3 blocks' LoRA
    optimizer = build_optimizer(model, PEAK, 0.0, (0.9, 0.999), 1e-8,
                                discriminative_learning_rates(groups, PEAK, 2.0))  # fmt: skip
    assert sorted({g["lr"] for g in optimizer.param_groups}, reverse=True) == [PEAK / 2**d for d in range(4)]


def test_gradual_unfreezing_leaves_frozen_groups_bit_identical_until_their_step():
    model, every = hfzoo_bert(), 2
    groups = layer_groups(model)
    optimizer = build_optimizer(model, 1e-2, 0.01, (0.9, 0.999), 1e-8)
    unfreezing = GradualUnfreezing(groups, every)
    start = [[p.detach().clone() for p in group] for group in groups]
    changed_after: dict[int, int] = {}
    torch.manual_seed(1)
    for step in range(every * len(groups)):
        unfreezing.apply(step)
        input_ids = torch.randint(5, 200, (4, 12))
        model(input_ids=input_ids, labels=torch.randint(0, 3, (4,))).loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        for depth, group in enumerate(groups):
            same = all(torch.equal(p, s) for p, s in zip(group, start[depth]))
            if not same:
                changed_after.setdefault(depth, step + 1)
    # group d trains from the step after d * every completed ones: unchanged until then, changed by it
    assert changed_after == {depth: depth * every + 1 for depth in range(len(groups))}


def test_bad_ulmfit_settings_are_named():
    common = ["--model", "x", "--task", "sequence-classification", "--train_file", "a.csv"]
    cases = {
        "stlr_cut_frac": ["--lr_schedule", "slanted_triangular", "--stlr_cut_frac", "1.5"],
        "stlr_ratio": ["--stlr_ratio", "4"],
        "discriminative_lr_decay": ["--discriminative_lr_decay", "0.5"],
        "unfreeze_every": ["--unfreeze_every", "3"],
        "warmup_ratio": ["--lr_schedule", "slanted_triangular", "--warmup_ratio", "0.1"],
        "lr_schedule": ["--lr_schedule", "triangle"],
    }
    for key, extra in cases.items():
        with pytest.raises(ValueError, match=f"'{key}'"):
            parse_args([*common, *extra])


ULMFIT = ["--discriminative_lr_decay", "2.6", "--lr_schedule", "slanted_triangular", "--stlr_cut_frac", "0.2",
          "--gradual_unfreezing", "true", "--unfreeze_every", "2"]  # fmt: skip


def recipe_args(base: dict[str, Path], output_dir: Path, steps: int, *extra: str) -> list[str]:
    return [
        "--model", str(base["base"]), "--task", "sequence-classification", "--train_file", str(base["train"]),
        "--validation_file", str(base["validation"]), "--max_train_samples", "64", "--max_eval_samples", "32",
        "--max_length", "48", "--per_device_batch_size", "8", "--max_steps", str(steps), "--log_every", "1",
        "--learning_rate", "3e-3", "--method", "full", "--output_dir", str(output_dir), *ULMFIT, *extra,
    ]  # fmt: skip


def test_the_recipe_trains_with_all_three_options_and_resumes_mid_unfreezing(base, tmp_path):
    reference = run(*recipe_args(base, tmp_path / "reference", 40, "--save_every", "5", "--keep_checkpoints", "9"))
    losses = list(train_losses(reference).values())
    # a random-init bert-tiny on 6 areas learns slowly; measured: last 8 steps' mean 0.954 x the first 8's
    assert sum(losses[-8:]) < 0.97 * sum(losses[:8]), losses

    resumed = Path(shutil.copytree(reference, tmp_path / "resumed"))
    for checkpoint in list_checkpoints(resumed)[1:]:  # keep step 5: three of the six layer groups train by then
        shutil.rmtree(checkpoint)
    (resumed / "model.safetensors").unlink()
    run(*recipe_args(base, resumed, 40, "--save_every", "5", "--keep_checkpoints", "9", "--resume", "true"))
    records = read_log(resumed)
    restart = max(i for i, r in enumerate(records) if r["event"] == "start")
    assert records[restart]["step"] == 5
    after = {r["step"]: r["loss"] for r in records[restart:] if r["event"] == "train"}
    assert after == {step: loss for step, loss in train_losses(reference).items() if step > 5}
    assert_same_tensors(resumed / "model.safetensors", reference / "model.safetensors")


def test_the_recipe_applies_the_options_to_a_lora_wrapped_model(base, tmp_path):
    out = run(*recipe_args(base, tmp_path / "lora", 6, "--method", "lora"))
    assert (out / "adapter_model.safetensors").is_file() and (out / "metrics.json").is_file()
    logged = [r["lr"] for r in read_log(out) if r["event"] == "train"]  # the head's rate after each step
    cut = math.floor(6 * 0.2)
    expected = [3e-3 * (1 + (s / cut if s < cut else 1 - (s - cut) / (6 - cut)) * 31) / 32 for s in range(1, 7)]
    assert logged == pytest.approx(expected, rel=1e-9)
