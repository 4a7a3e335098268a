"""The encoder test presets and the inputs encoder tests feed them: one right-padded batch of two segments and
masked-LM labels on it."""

import torch

ENCODER_PRESETS = ("bert-tiny", "roberta-tiny", "modernbert-tiny", "deberta-tiny")
LENGTHS = (9, 5, 7)  # one right-padded batch: rows of 9, 5 and 7 real tokens
# Reloaded weights are bit-identical, but safetensors may place them at other memory alignments, which changes the
# BLAS summation order: observed differences are ~4e-9, so "identical outputs" is checked at 1e-6.
SAME = dict(atol=1e-6, rtol=0)


def right_padded_batch(seed: int = 0) -> dict[str, torch.Tensor]:
    """input_ids (pad id 0 after each row), attention_mask and two-segment token_type_ids for `LENGTHS`."""
    generator = torch.Generator().manual_seed(seed)
    width = max(LENGTHS)
    input_ids = torch.randint(5, 1000, (len(LENGTHS), width), generator=generator)
    positions = torch.arange(width)
    attention_mask = (positions[None] < torch.tensor(LENGTHS)[:, None]).long()
    token_type_ids = ((positions[None] >= 3) & attention_mask.bool()).long()
    return {"input_ids": input_ids * attention_mask, "attention_mask": attention_mask, "token_type_ids": token_type_ids}


def masked_labels(input_ids: torch.Tensor, attention_mask: torch.Tensor, seed: int = 0) -> torch.Tensor:
    """Labels on ~30% of the real tokens (at least one per row), -100 elsewhere, as an MLM collator makes them."""
    generator = torch.Generator().manual_seed(seed)
    chosen = (torch.rand(input_ids.shape, generator=generator) < 0.3) & attention_mask.bool()
    chosen[:, 1] = True
    return torch.where(chosen, input_ids, torch.full_like(input_ids, -100))

