"""T5's relative attention bias (Raffel et al., 2020): each head learns a bias per bucket of the distance from query
to key (exact for short distances, logarithmic up to `relative_attention_max_distance`), shared by a stack's layers.

A component file, registered with `layers.POSITION_KINDS` when imported: only checkpoints whose config uses
`position_embedding="relative"` carry it.
"""

import math

import torch
from torch import nn

from .layers import POSITION_KINDS, PositionKind, PositionSignals, key_minus_query

__all__ = ["RelativePositionBias"]


def relative_position_bucket(relative_position: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int):
    """T5's buckets: exact for small distances, logarithmic up to `max_distance`, one bucket beyond."""
    buckets = torch.zeros_like(relative_position)
    if bidirectional:
        num_buckets //= 2
        buckets += (relative_position > 0).long() * num_buckets
        relative_position = relative_position.abs()
    else:
        relative_position = -torch.clamp(relative_position, max=0)
    max_exact = num_buckets // 2
    is_small = relative_position < max_exact
    large = max_exact + (
        torch.log(relative_position.float().clamp(min=1) / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)
    ).long()
    large = torch.clamp(large, max=num_buckets - 1)
    return buckets + torch.where(is_small, relative_position, large)


class RelativePositionBias(nn.Embedding):
    """One row of per-head biases per bucket: an embedding (held as `relative_attention_bias`, T5's name for it)
    looked up by the buckets of every (query, key) pair."""

    def __init__(self, config, bidirectional: bool, width: int):
        super().__init__(config.relative_attention_num_buckets, config.num_attention_heads)
        self.config = config
        self.bidirectional = bidirectional

    def forward(self, position_ids: torch.Tensor, query_start, key_length: int, dtype: torch.dtype) -> PositionSignals:
        config = self.config
        relative = key_minus_query(config, position_ids, query_start, key_length)
        buckets = relative_position_bucket(
            relative, self.bidirectional, config.relative_attention_num_buckets, config.relative_attention_max_distance
        )
        bias = super().forward(buckets).permute(2, 0, 1)
        return PositionSignals(attention_bias=bias.unsqueeze(0).to(dtype))


POSITION_KINDS["relative"] = PositionKind(RelativePositionBias, "relative_attention_bias")
