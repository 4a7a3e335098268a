"""DeBERTa's disentangled attention (He et al., 2021; DeBERTa-v2/v3's log-bucketed variant) as an attention bias.

A score is content-to-content plus content-to-position (c2p: the query's content against the key's relative
position) plus position-to-content (p2c: the key's content against the query's relative position). The relative
position embeddings are shared by all layers of a stack and normalised once; each layer projects them with its own
query/key projection (DeBERTa-v2's `share_att_key`). Both position terms reach the attention kernel as one additive
bias (`position_bias`), so eager and sdpa still come from transformers' attention registry, as T5's bias does.

A component file, registered with `layers.POSITION_KINDS` when imported: only checkpoints whose config uses the kind
carry it (`ZooTransformerPreTrainedModel.code_module`).
"""

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from .layers import POSITION_KINDS, PositionKind, PositionSignals, build_norm, key_minus_query

__all__ = ["DisentangledPositionEmbedding"]


class DisentangledPositions(NamedTuple):
    """What a stack hands each layer: the normalised relative embeddings a layer projects, and, for each (query,
    key) pair, the row of `embeddings` holding their relative position."""

    embeddings: torch.Tensor
    index: torch.Tensor


def score_terms(config) -> int:
    """How many terms a self-attention score sums: DeBERTa scales by 1/sqrt(head_dim * terms) to keep the variance
    of one term."""
    return 1 + len(config.position_attention_terms.split("|"))


def log_bucket_position(relative: torch.Tensor, buckets: int, max_distance: int) -> torch.Tensor:
    """DeBERTa-v2's buckets of a signed distance: exact up to buckets // 2, logarithmic up to `max_distance`."""
    sign = torch.sign(relative)
    mid = buckets // 2
    # Distances inside the exact range take a placeholder that keeps the log finite; `where` discards it.
    distance = torch.where(relative.abs() < mid, torch.full_like(relative, mid - 1), relative.abs())
    log_position = (
        torch.ceil(torch.log(distance / mid) / torch.log(torch.tensor((max_distance - 1) / mid)) * (mid - 1)) + mid
    )
    return torch.where(distance <= mid, relative.to(log_position.dtype), log_position * sign).long()


class DisentangledPositionEmbedding(nn.Module):
    """The stack's relative position embeddings (2 * span rows) and their norm (DeBERTa-v2's `norm_rel_ebd`)."""

    def __init__(self, config, bidirectional: bool, width: int):
        super().__init__()
        self.config = config
        self.buckets = config.position_buckets
        self.max_distance = config.max_relative_positions
        self.span = self.buckets if self.buckets > 0 else self.max_distance
        self.relative_embeddings = nn.Embedding(2 * self.span, config.hidden_size)
        self.relative_norm = build_norm(config)

    def relative_rows(self, relative: torch.Tensor) -> torch.Tensor:
        """The embedding row of each signed distance (query minus key, as DeBERTa counts)."""
        if self.buckets > 0:
            relative = log_bucket_position(relative, self.buckets, self.max_distance)
        return torch.clamp(relative + self.span, 0, 2 * self.span - 1)

    def forward(self, position_ids: torch.Tensor, query_start, key_length: int, dtype: torch.dtype) -> PositionSignals:
        """What each layer projects (`disentangled_position_bias`) for queries at cache slots `query_start` onwards
        against `key_length` keys (a cache holds the others)."""
        relative = -key_minus_query(self.config, position_ids, query_start, key_length)  # query minus key
        index = self.relative_rows(relative)
        if torch.compiler.is_compiling():
            # Slicing by tensor values would break the graph: a compiled forward projects every row.
            return PositionSignals(
                layer_positions=DisentangledPositions(self.relative_norm(self.relative_embeddings.weight), index)
            )
        # Only the rows between the extreme distances are used (the bucketing is monotone): the layers project
        # those alone, not all 2 * span (512 rows at DeBERTa-v3's 256 buckets) for a short sequence.
        first, last = int(index.min()), int(index.max())
        embeddings = self.relative_norm(self.relative_embeddings.weight[first : last + 1])
        return PositionSignals(layer_positions=DisentangledPositions(embeddings, index - first))


def disentangled_position_bias(
    attention: nn.Module, query: torch.Tensor, key: torch.Tensor, positions: DisentangledPositions
) -> torch.Tensor:
    """The c2p + p2c scores of one self-attention layer, `[batch, heads, query, key]`, scaled like its content scores.

    `query` is `[batch, heads, query, head_dim]`, `key` `[batch, kv_heads, key, head_dim]` (a cache's keys included).
    The relative embeddings go through the layer's fused projection as a module call, so an adapter on it (LoRA,
    IA3, ...) adapts the position projections too, as it would DeBERTa's `query_proj` / `key_proj`.
    """
    config = attention.config
    embeddings = F.dropout(positions.embeddings, config.hidden_dropout, attention.training)
    projected = attention.qkv_proj(embeddings).view(embeddings.shape[0], -1, attention.head_dim)
    position_query, position_key, _ = projected.split(
        (attention.num_heads, attention.num_key_value_heads, attention.num_key_value_heads), dim=1
    )
    groups = attention.num_key_value_groups
    index = positions.index.expand(query.shape[0], query.shape[1], -1, -1)
    bias = torch.zeros((), dtype=query.dtype, device=query.device)
    terms = config.position_attention_terms.split("|")
    if "c2p" in terms:  # query content i . key position (i - j)
        content_to_position = torch.einsum("bhqd,rhd->bhqr", query, position_key.repeat_interleave(groups, dim=1))
        bias = bias + content_to_position.gather(-1, index)
    if "p2c" in terms:  # key content j . query position (i - j)
        position_to_content = torch.einsum("bhkd,rhd->bhrk", key.repeat_interleave(groups, dim=1), position_query)
        bias = bias + position_to_content.gather(-2, index)
    return bias * attention.scaling


POSITION_KINDS["disentangled"] = PositionKind(
    DisentangledPositionEmbedding, "disentangled", disentangled_position_bias, score_terms
)
