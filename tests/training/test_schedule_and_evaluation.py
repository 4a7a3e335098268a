"""Warmup then cosine to the minimum, or warmup-stable-decay; evaluation shards that cover every example once; the
eval loss is the model's token-weighted loss.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

import hfzoo
from hfzoo.core.cpu_layout import tune_for_cpu
from hfzoo.training import get_objective
from hfzoo.training.evaluation import EvalShard, evaluate
from hfzoo.training.loop import build_optimizer, build_scheduler


def test_warmup_then_cosine_to_the_minimum():
    optimizer = build_optimizer(torch.nn.Linear(2, 2), 1e-3, 0.1, (0.9, 0.95), 1e-8)
    assert [g["weight_decay"] for g in optimizer.param_groups] == [0.1, 0.0]  # matrices decay, biases do not
    scheduler = build_scheduler(optimizer, warmup_steps=4, max_steps=20, min_lr_ratio=0.1)
    lrs = []
    for _ in range(21):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    assert lrs[:5] == pytest.approx([0.0, 2.5e-4, 5e-4, 7.5e-4, 1e-3])
    assert lrs[12] == pytest.approx(1e-4 + 0.9e-3 * 0.5)  # half way through the decay
    assert lrs[20] == pytest.approx(1e-4)
    assert all(a >= b for a, b in zip(lrs[4:], lrs[5:]))


def test_fused_adamw_updates_like_the_default_across_weight_layouts():
    """The fused kernel is a speed lever only: its updates are the per-parameter default's to rounding, also where
    `tune_for_cpu` lays a weight out column-major, the model steps in eval mode (another layout), and the moments come
    back row-major from a checkpoint (the kernel reads parameter, gradient and moments as flat arrays)."""
    torch.manual_seed(0)
    fused_model = torch.nn.Sequential(torch.nn.Linear(32, 8), torch.nn.Tanh())
    plain_model = copy.deepcopy(fused_model)
    tune_for_cpu(fused_model)
    fused = build_optimizer(fused_model, 1e-2, 0.1, (0.9, 0.95), 1e-8)
    plain = torch.optim.AdamW([{"params": [p for p in plain_model.parameters() if p.ndim >= 2], "weight_decay": 0.1},
                               {"params": [p for p in plain_model.parameters() if p.ndim < 2], "weight_decay": 0.0}],
                              lr=1e-2, betas=(0.9, 0.95), eps=1e-8)  # fmt: skip
    assert fused.defaults["fused"] and not plain.defaults["fused"]
    inputs = torch.randn(16, 32)

    def step(model, optimizer):
        model(inputs).square().mean().backward()
        optimizer.step()
        optimizer.zero_grad()

    for mode in (True, True, False, True):
        for model, optimizer in ((fused_model, fused), (plain_model, plain)):
            model.train(mode)
            step(model, optimizer)
    assert fused_model[0].weight.stride() == (1, 8)  # a narrowing weight trains column-major
    saved = fused.state_dict()  # as a checkpoint holds it: row-major
    saved["state"] = {i: {k: v.contiguous() for k, v in s.items()} for i, s in saved["state"].items()}
    fused.load_state_dict(saved)
    for model, optimizer in ((fused_model, fused), (plain_model, plain)):
        step(model, optimizer)
    for after_fused, after_plain in zip(fused_model.parameters(), plain_model.parameters()):
        torch.testing.assert_close(after_fused, after_plain, rtol=1e-5, atol=1e-6)


def _wsd_learning_rates(optimizer, scheduler, steps: int) -> list[float]:
    lrs = []
    for _ in range(steps):
        lrs.append(scheduler.get_last_lr()[0])
        optimizer.step()
        scheduler.step()
    return lrs


def test_wsd_holds_the_peak_then_decays_linearly_and_resumes_exactly():
    def fresh():
        optimizer = build_optimizer(torch.nn.Linear(2, 2), 1e-3, 0.1, (0.9, 0.95), 1e-8)
        return optimizer, build_scheduler(optimizer, 4, 20, 0.1, schedule="wsd", decay_fraction=0.25)

    optimizer, scheduler = fresh()
    lrs = _wsd_learning_rates(optimizer, scheduler, 21)
    assert lrs[:5] == pytest.approx([1e-4 + 0.9e-3 * i / 4 for i in range(5)])  # transformers' wsd warms from the min
    assert lrs[4:16] == pytest.approx([1e-3] * 12)  # stable until the last quarter (5 steps) of 20
    assert lrs[15:21] == pytest.approx([1e-3 - 0.9e-3 * i / 5 for i in range(6)])  # linear down to min_lr_ratio
    # Resumed from a state dict after 9 steps, the rest of the schedule is the same to the bit.
    optimizer, scheduler = fresh()
    _wsd_learning_rates(optimizer, scheduler, 9)
    states = optimizer.state_dict(), scheduler.state_dict()
    optimizer, scheduler = fresh()
    optimizer.load_state_dict(states[0])
    scheduler.load_state_dict(states[1])
    assert _wsd_learning_rates(optimizer, scheduler, 12) == lrs[9:]


def test_eval_shards_cover_every_example_once_with_equal_lengths():
    examples = [{"input_ids": [i]} for i in range(7)]
    shards = [EvalShard(examples, rank, 3) for rank in range(3)]
    assert [len(s) for s in shards] == [3, 3, 3]
    real = sorted(ex["input_ids"][0] for s in shards for ex, is_real in (s[i] for i in range(len(s))) if is_real)
    assert real == list(range(7))


def test_evaluate_is_the_token_weighted_loss_of_the_model(accelerator, tokenizer, tiny_model):
    model = tiny_model("gpt-tiny", vocab_size=len(tokenizer)).train()
    objective = get_objective("clm", "gpt-tiny")
    collator = objective.make_collator(tokenizer, {}, torch.Generator())
    lengths = [9, 5, 12, 7, 3]  # padded batches: the collator masks padding out of the labels
    examples = [{"input_ids": list(range(10, 10 + n))} for n in lengths]
    loader = torch.utils.data.DataLoader(EvalShard(examples, 0, 1), batch_size=2, collate_fn=list)
    metrics = evaluate(model, loader, collator, accelerator, shifts_labels=True)
    with torch.no_grad():
        total = sum(
            model(input_ids=torch.tensor([ex["input_ids"]]), labels=torch.tensor([ex["input_ids"]])).loss.item()
            * (len(ex["input_ids"]) - 1)
            for ex in examples
        )
    assert metrics["eval_targets"] == sum(n - 1 for n in lengths)
    assert metrics["eval_loss"] == pytest.approx(total / metrics["eval_targets"], abs=1e-5)
    assert metrics["perplexity"] == pytest.approx(math.exp(metrics["eval_loss"]))
    assert model.training  # evaluate restores the mode it found


@pytest.mark.parametrize("objective", ["mlm", "electra"])
def test_token_accuracy_scores_each_target_by_its_most_likely_token(accelerator, objective):
    """Full-width logits (a masked LM in eval mode) and labelled-rows-only logits (ELECTRA's generator) alike: the
    targets are labelled with the model's own prediction on one half and another token on the other, so 0.5."""
    torch.manual_seed(0)
    model = get_objective(objective, "bert-tiny").build_model(hfzoo.preset_config("bert-tiny"), {}).eval()
    input_ids = torch.randint(5, 1000, (4, 12))
    masked = torch.zeros_like(input_ids, dtype=torch.bool)
    masked[:, 2:6] = True
    field = get_objective(objective, "bert-tiny").token_accuracy_of
    with torch.no_grad():
        logits = model(input_ids=input_ids, labels=input_ids.masked_fill(~masked, -100))[field]
    predicted = logits.argmax(-1)
    predicted = predicted[masked] if predicted.shape == input_ids.shape else predicted
    wrong = (predicted + 1) % logits.shape[-1]
    targets = torch.where(torch.arange(len(predicted)) % 2 == 0, predicted, wrong)
    labels = torch.full_like(input_ids, -100).masked_scatter(masked, targets)
    batch = {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}
    loader = torch.utils.data.DataLoader(EvalShard([0, 1, 2, 3], 0, 1), batch_size=4, collate_fn=list)
    metrics = evaluate(model, loader, lambda _: dict(batch), accelerator, shifts_labels=False, token_accuracy_of=field)
    assert metrics["eval_token_accuracy"] == 0.5 and metrics["eval_targets"] == 16
