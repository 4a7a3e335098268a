"""ALiBi (Press et al., 2022): no position embedding; each head adds to its scores its own slope times the distance
from query to key, so that a model trained on short inputs extrapolates to longer ones.

A component file, registered with `layers.POSITION_KINDS` when imported: only checkpoints whose config uses
`position_embedding="alibi"` carry it.
"""

import math

import torch
from torch import nn

from .layers import POSITION_KINDS, PositionKind, PositionSignals, key_minus_query

__all__ = ["AlibiBias"]


def alibi_slopes(num_heads: int, device: torch.device) -> torch.Tensor:
    """A geometric sequence of slopes, interleaved for head counts that are not powers of 2."""
    closest = 2 ** math.floor(math.log2(num_heads))
    base = 2.0 ** (-8.0 / closest)
    slopes = [base ** (i + 1) for i in range(closest)]
    if closest < num_heads:
        extra = 2.0 ** (-4.0 / closest)
        slopes += [extra ** (2 * i + 1) for i in range(num_heads - closest)]
    return torch.tensor(slopes, device=device, dtype=torch.float32)


class AlibiBias(nn.Module):
    """The heads' linear biases over the keys behind each query (causal) or on both sides of it. No weights."""

    def __init__(self, config, bidirectional: bool, width: int):
        super().__init__()
        self.config = config
        self.bidirectional = bidirectional

    def forward(self, position_ids: torch.Tensor, query_start, key_length: int, dtype: torch.dtype) -> PositionSignals:
        relative = key_minus_query(self.config, position_ids, query_start, key_length)
        distance = relative.abs().neg() if self.bidirectional else relative.clamp(max=0)
        bias = alibi_slopes(self.config.num_attention_heads, relative.device)[:, None, None] * distance
        return PositionSignals(attention_bias=bias.unsqueeze(0).to(dtype))


POSITION_KINDS["alibi"] = PositionKind(AlibiBias, "alibi")
