"""SpanBERT's pretraining (Joshi et al., 2020): span masking plus the span-boundary objective (SBO).

Spans of whole words are masked (`MaskedLMCollator(masking="span")`); besides the masked LM, each token of a masked
span is predicted from the encoder's outputs at the span's two boundary tokens (the one before the span and the one
after it) and an embedding of the token's position inside the span, through a two-layer feed-forward network with
GELU and layer norm, scored against the shared token embedding (paper, sec. 3.2). The loss is the sum of the two
cross-entropies. The boundary head is a training-time module: what a run keeps is the masked LM (`kept_model`), a
normal encoder checkpoint.

The spans are read from the labels, not passed by the collator: the collator leaves at least one unmasked word
between two spans, so a span is a maximal run of labelled positions. A run cut by a token that is never masked (a
separator between packed documents) counts as two spans with that token as a boundary, which is what it is. A span at
the very start or end of a block has no token beyond it; its missing boundary is the block's first or last token.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.utils import ModelOutput

from ..data.collators.common import IGNORE_INDEX
from ..models import ZooEncoderConfig, ZooEncoderForMaskedLM
from ..models.layers import build_norm
from .training_module import PretrainingModule


def span_boundaries(masked: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For every position of `masked` (`[batch, length]`, bool): the position just before its run of masked
    positions, the position just after it, and its offset in the run (meaningful where `masked`; clamped to the
    block at its edges)."""
    length = masked.shape[1]
    position = torch.arange(length, device=masked.device).expand_as(masked)
    before = F.pad(masked[:, :-1], (1, 0), value=False)
    after = F.pad(masked[:, 1:], (0, 1), value=False)
    start = torch.where(masked & ~before, position, 0).cummax(1).values
    end = torch.where(masked & ~after, position, length - 1).flip(1).cummin(1).values.flip(1)
    return (start - 1).clamp(min=0), (end + 1).clamp(max=length - 1), position - start


class SpanBoundaryHead(nn.Module):
    """f(x_{s-1}, x_{e+1}, p_i): two layers of Linear, GELU and layer norm over the boundary encodings and the
    relative position embedding, then the shared token embedding as the output layer (with a bias of its own)."""

    def __init__(self, config: ZooEncoderConfig, max_span_positions: int):
        super().__init__()
        width, embedding_width = config.hidden_size, config.embedding_size or config.hidden_size
        self.position_embedding = nn.Embedding(max_span_positions, width)
        self.first = nn.Linear(3 * width, width)
        self.first_norm = build_norm(config, width)
        self.second = nn.Linear(width, embedding_width)
        self.second_norm = build_norm(config, embedding_width)
        self.act_fn = ACT2FN["gelu"]
        self.output_bias = nn.Parameter(torch.zeros(config.vocab_size))
        for module in (self.position_embedding, self.first, self.second):
            nn.init.normal_(module.weight, std=config.initializer_range)
        for layer in (self.first, self.second):
            nn.init.zeros_(layer.bias)

    def forward(
        self, left: torch.Tensor, right: torch.Tensor, offset: torch.Tensor, token_embedding: torch.Tensor
    ) -> torch.Tensor:
        """Vocabulary logits `[targets, vocab]` from the boundary encodings `[targets, hidden]` and offsets."""
        offset = offset.clamp(max=self.position_embedding.num_embeddings - 1)
        hidden = torch.cat([left, right, self.position_embedding(offset)], dim=-1)
        hidden = self.first_norm(self.act_fn(self.first(hidden)))
        hidden = self.second_norm(self.act_fn(self.second(hidden)))
        return F.linear(hidden, token_embedding, self.output_bias)


@dataclass
class SpanBertPreTrainingOutput(ModelOutput):
    """`loss` = `masked_lm_loss` + `span_boundary_loss` (+ a mixture of experts' weighted `aux_loss`)."""

    loss: torch.FloatTensor | None = None
    masked_lm_loss: torch.FloatTensor | None = None
    span_boundary_loss: torch.FloatTensor | None = None
    aux_loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    span_boundary_logits: torch.FloatTensor | None = None


class SpanBertPreTraining(PretrainingModule):
    """A masked LM and its span-boundary head, trained on span-masked batches.

    Args:
        config: the encoder's config (a preset of the encoder family).
        max_span_positions: relative positions the boundary head embeds; a longer span's later tokens share the last
            (SpanBERT's spans are at most 10 words, so the default 32 tokens covers sub-word splits).
    """

    kept = "masked_lm"

    def __init__(self, config: ZooEncoderConfig, max_span_positions: int = 32):
        super().__init__()
        self.check_options(config, max_span_positions)
        self.masked_lm = ZooEncoderForMaskedLM(config)
        self.span_boundary = SpanBoundaryHead(config, max_span_positions)
        self.config = config  # what the run's log and card describe: the model it keeps

    @staticmethod
    def check_options(config: ZooEncoderConfig, max_span_positions: int = 32) -> None:
        """Raise, naming the config key, if the options cannot make a boundary head."""
        if not isinstance(max_span_positions, int) or max_span_positions < 1:
            raise ValueError("config key 'objective_options': max_span_positions is how many positions inside a span "
                             f"the boundary head embeds, an integer >= 1 (default 32), got {max_span_positions!r}.")

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
    ) -> SpanBertPreTrainingOutput:
        """`labels` are the span-masked tokens (-100 elsewhere), as `MaskedLMCollator(masking="span")` makes them."""
        if labels is None:
            raise ValueError("SpanBertPreTraining needs labels: the masked spans' tokens (MaskedLMCollator, span masking).")
        inputs = {"input_ids": input_ids, "attention_mask": attention_mask, "token_type_ids": token_type_ids}
        encoded = self.masked_lm.encode(inputs)
        masked_lm = self.masked_lm.head(encoded, labels, inputs)
        masked = labels != IGNORE_INDEX
        left, right, offset = span_boundaries(masked)
        rows = torch.arange(masked.shape[0], device=masked.device)[:, None].expand_as(masked)[masked]
        hidden = encoded.last_hidden_state
        boundary_logits = self.span_boundary(
            hidden[rows, left[masked]], hidden[rows, right[masked]], offset[masked],
            self.masked_lm.get_output_embeddings().weight,
        )  # fmt: skip
        span_boundary_loss = F.cross_entropy(boundary_logits.float(), labels[masked])
        masked_lm_loss = masked_lm.loss if masked_lm.aux_loss is None else \
            masked_lm.loss - self.config.router_aux_loss_coef * masked_lm.aux_loss  # fmt: skip
        return SpanBertPreTrainingOutput(
            loss=masked_lm.loss + span_boundary_loss,
            masked_lm_loss=masked_lm_loss,
            span_boundary_loss=span_boundary_loss,
            aux_loss=masked_lm.aux_loss,
            logits=masked_lm.logits,
            span_boundary_logits=boundary_logits,
        )
