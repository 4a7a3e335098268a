"""ELECTRA's replaced-token detection (Clark et al. 2020), the data side.

The generator is a small masked LM trained on :func:`electra_collator` batches; its samples at
the masked positions make the discriminator's input, and :func:`replaced_token_detection_batch`
labels which tokens were replaced. The sampling itself belongs to the training step (it needs
the generator's logits), e.g. ``sampled = torch.distributions.Categorical(logits=logits.detach()).sample()``.
"""

from __future__ import annotations

import torch
from transformers import PreTrainedTokenizerBase

from .common import IGNORE_INDEX
from .mlm import MaskedLMCollator

# ELECTRA's ``pretrain_helpers.mask``: no random replacement (the generator's samples play that role).
ELECTRA_MASKING = {"mask_replace_prob": 0.85, "random_replace_prob": 0.0}


def electra_collator(
    tokenizer: PreTrainedTokenizerBase,
    mlm_probability: float = 0.15,
    generator: torch.Generator | None = None,
    **kwargs,
) -> MaskedLMCollator:
    """The generator's batches with ELECTRA's masking: ``round(p * n)`` tokens, 85% ``[MASK]``, 15% unchanged.

    ELECTRA's ``pretrain_helpers.mask`` uses no random replacement (the generator's samples play
    that role); ``mlm_probability`` was 0.15 for Small/Base and 0.25 for Large. Other
    :class:`MaskedLMCollator` arguments (``masking``, ``pad_to_multiple_of`` ...) pass through.
    """
    return MaskedLMCollator(tokenizer, mlm_probability=mlm_probability, generator=generator, **ELECTRA_MASKING, **kwargs)


def replaced_token_detection_batch(
    batch: dict[str, torch.Tensor], sampled_ids: torch.Tensor
) -> dict[str, torch.Tensor]:
    """The discriminator's batch from a generator batch and the generator's samples (``[B, L]``).

    ``input_ids`` are the original tokens with each masked position (``labels != -100``) replaced
    by its sample; ``labels`` are 1 where the result differs from the original token, 0 where it
    does not (a sample equal to the original counts as original, as in ELECTRA), -100 on padding.
    """
    masked = batch["labels"] != IGNORE_INDEX
    original = torch.where(masked, batch["labels"], batch["input_ids"])
    input_ids = torch.where(masked, sampled_ids, original)
    labels = (input_ids != original).long().masked_fill(batch["attention_mask"] == 0, IGNORE_INDEX)
    extra = {k: v for k, v in batch.items() if k == "token_type_ids"}
    return {"input_ids": input_ids, "attention_mask": batch["attention_mask"], "labels": labels, **extra}
