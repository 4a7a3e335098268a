"""SpanBERT's span-boundary objective (issue 35 item 3): the boundary positions read from span-masked labels, the
loss as the masked LM's plus the boundary head's over the same tokens, a boundary loss that falls in training, and
`--objective spanbert` through the pretrain recipe saving a masked LM the Auto classes load."""

import json

import pytest
import torch
import torch.nn.functional as F
from tests.helpers.recipe_runs import run_pretrain
from transformers import AutoModelForMaskedLM, AutoModelForTokenClassification

import hfzoo
from hfzoo.data.collators import MaskedLMCollator
from hfzoo.models import ZooEncoderForMaskedLM
from hfzoo.objectives.objective import get_objective
from hfzoo.objectives.spanbert import SpanBertPreTraining, span_boundaries
from hfzoo.training.logging import read_log


def spanbert(seed: int = 0, **options) -> SpanBertPreTraining:
    torch.manual_seed(seed)
    return SpanBertPreTraining(hfzoo.preset_config("bert-tiny", hidden_dropout=0.0, attention_dropout=0.0), **options)


def test_each_masked_token_gets_the_tokens_just_outside_its_span_and_its_offset():
    masked = torch.tensor([[0, 1, 1, 1, 0, 0, 1, 0],
                           [1, 1, 0, 1, 0, 1, 1, 1]], dtype=torch.bool)  # fmt: skip
    left, right, offset = span_boundaries(masked)
    # Row 0: spans 1-3 and 6. Row 1: spans 0-1 (nothing before: the block's first token), 3, and 5-7 (nothing
    # after: the block's last token).
    assert left[masked].tolist() == [0, 0, 0, 5, 0, 0, 2, 4, 4, 4]
    assert right[masked].tolist() == [4, 4, 4, 7, 2, 2, 4, 7, 7, 7]
    assert offset[masked].tolist() == [0, 1, 2, 0, 0, 1, 0, 0, 1, 2]


def _span_masked_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """Two rows of 24 tokens with spans masked by hand, some tokens replaced by [MASK] (id 4)."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(5, 1000, (2, 24), generator=generator)
    labels = torch.full_like(input_ids, -100)
    for row, start, end in ((0, 2, 6), (0, 10, 11), (1, 0, 3), (1, 15, 24)):
        labels[row, start:end] = input_ids[row, start:end]
    return {"input_ids": input_ids.masked_fill(labels != -100, 4), "attention_mask": torch.ones_like(input_ids),
            "labels": labels}  # fmt: skip


def test_the_loss_is_the_masked_lm_loss_plus_the_boundary_heads_loss_from_the_span_edges():
    model = spanbert().eval()
    batch = _span_masked_batch()
    outputs = model(**batch)
    hidden = model.masked_lm.model(input_ids=batch["input_ids"]).last_hidden_state
    # Each masked token, predicted by hand from the encodings just outside its span and its offset in the span.
    expected_logits, targets = [], []
    for row, start, end in ((0, 2, 6), (0, 10, 11), (1, 0, 3), (1, 15, 24)):
        before, after = max(start - 1, 0), min(end, 23)
        for offset, position in enumerate(range(start, end)):
            head = model.span_boundary
            features = torch.cat([hidden[row, before], hidden[row, after], head.position_embedding.weight[offset]])
            features = head.first_norm(F.gelu(head.first(features)))
            features = head.second_norm(F.gelu(head.second(features)))
            expected_logits.append(features @ model.masked_lm.model.embed_tokens.weight.T + head.output_bias)
            targets.append(batch["labels"][row, position])
    boundary_loss = F.cross_entropy(torch.stack(expected_logits), torch.stack(targets))
    masked_lm_loss = model.masked_lm(**batch).loss
    torch.testing.assert_close(outputs.span_boundary_loss, boundary_loss)
    torch.testing.assert_close(outputs.masked_lm_loss, masked_lm_loss)
    torch.testing.assert_close(outputs.loss, masked_lm_loss + boundary_loss)


def test_the_boundary_loss_falls_and_its_gradient_reaches_the_encoder():
    model = spanbert().train()
    batch = _span_masked_batch()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(25):
        outputs = model(**batch)
        optimizer.zero_grad()
        outputs.span_boundary_loss.backward()
        assert model.masked_lm.model.layers[0].mlp.up_proj.weight.grad.abs().sum() > 0
        optimizer.step()
        losses.append(outputs.span_boundary_loss.item())
    assert losses[-1] < 0.5 * losses[0]


def test_the_objective_fixes_span_masking_and_checks_its_option():
    objective = get_objective("spanbert", "bert-tiny")
    with pytest.raises(ValueError, match="objective 'spanbert' trains with masking='span'"):
        objective.check_collator_options({"masking": "whole_word"})
    with pytest.raises(ValueError, match="max_span_positions .* an integer >= 1"):
        objective.check_options({"max_span_positions": 0}, hfzoo.preset_config("bert-tiny"))
    assert objective.collator is MaskedLMCollator and objective.fixed_collator_options["masking"] == "span"


def test_the_recipe_trains_spanbert_and_saves_a_masked_lm_the_auto_classes_load(tmp_path):
    output_dir = run_pretrain(
        "--preset", "bert-tiny", "--objective", "spanbert", "--tokenizer_kind", "wordpiece", "--max_train_samples",
        "40", "--max_steps", "3", "--eval_every", "3", "--save_every", "100", "--output_dir", str(tmp_path / "sbo"),
    )  # fmt: skip
    evaluation = [r for r in read_log(output_dir) if r["event"] == "eval"][-1]
    assert evaluation["eval_loss"] == pytest.approx(
        evaluation["eval_masked_lm_loss"] + evaluation["eval_span_boundary_loss"]
    )
    assert evaluation["perplexity"] == pytest.approx(torch.tensor(evaluation["eval_masked_lm_loss"]).exp().item())
    assert json.loads((output_dir / "config.json").read_text())["architectures"] == ["ZooEncoderForMaskedLM"]
    masked_lm, loading_info = AutoModelForMaskedLM.from_pretrained(output_dir, output_loading_info=True)
    assert type(masked_lm) is ZooEncoderForMaskedLM
    assert not loading_info["missing_keys"] and not loading_info["unexpected_keys"]
    tagger = AutoModelForTokenClassification.from_pretrained(output_dir, num_labels=5)
    assert torch.equal(tagger.model.embed_tokens.weight, masked_lm.model.embed_tokens.weight)
