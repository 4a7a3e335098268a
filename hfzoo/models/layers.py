"""Building blocks shared by the decoder, encoder and encoder-decoder families: norms, positions, feed-forward,
attention, and the transformer block made of them.

Every family builds from these modules, so a component switch (norm, activation, positions, attention
variant, mixture of experts) is implemented once. The modeling files import this file relatively
(`from .layers import ...`), which makes `save_pretrained` copy it next to the weights: a saved
checkpoint runs where hfzoo is not installed.
"""

import math
from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.cache_utils import Cache, EncoderDecoderCache
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

from .component_options import GATED_ACTIVATIONS


# ----------------------------------------------------------------------------------------------- component files
# Code that only some configs run is a file of its own that fills these tables when imported: the position kinds
# that bias attention scores (ALiBi, T5's relative bias, DeBERTa's disentangled attention: `POSITION_KINDS`), the
# mixture of experts, DeBERTa-v2's convolution and ModernBERT's local attention
# (`COMPONENTS`, by file name). A checkpoint carries such a file only where its config uses it
# (`config.component_files()`), through the module its `auto_map` names, which saving writes to import them
# (`ZooTransformerPreTrainedModel.save_pretrained`).
COMPONENTS: dict[str, type] = {}


def component(name: str) -> type:
    """The class registered by the component file `name`, or a ValueError saying how to load it."""
    if name not in COMPONENTS:
        raise ValueError(
            f"This config runs code in {name}.py, which this code did not import; load the model through the module "
            "its checkpoint's auto_map names."
        )
    return COMPONENTS[name]


# ----------------------------------------------------------------------------------------------- norms
class RMSNorm(nn.Module):
    """Root-mean-square norm (Zhang & Sennrich, 2019): no centring, no bias, computed in fp32.

    With `unit_offset` the weight is stored as an offset from 1 and the product is taken in fp32 before the cast,
    as Gemma computes it, so a Gemma checkpoint's weights load as they are.
    """

    def __init__(self, hidden_size: int, eps: float, unit_offset: bool = False):
        super().__init__()
        self.unit_offset = unit_offset
        self.weight = nn.Parameter(torch.zeros(hidden_size) if unit_offset else torch.ones(hidden_size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        dtype = hidden_states.dtype
        hidden_states = hidden_states.float()
        hidden_states = hidden_states * torch.rsqrt(hidden_states.pow(2).mean(-1, keepdim=True) + self.eps)
        if self.unit_offset:
            return (hidden_states * (1.0 + self.weight.float())).to(dtype)
        return self.weight * hidden_states.to(dtype)


def build_norm(config, width: int | None = None) -> nn.Module:
    """The config's norm over `width` channels (`hidden_size` unless given: ELECTRA's narrower embeddings)."""
    width = width or config.hidden_size
    if config.norm_type == "rmsnorm":
        return RMSNorm(width, config.norm_eps, config.norm_unit_offset)
    return nn.LayerNorm(width, eps=config.norm_eps, bias=config.norm_bias)


# ----------------------------------------------------------------------------------------------- positions
class PositionSignals(NamedTuple):
    """What a position scheme contributes: an embedding added to the input, rotary angles, an attention bias, or
    what each layer computes its own bias from (DeBERTa's relative embeddings, `PositionKind.layer_bias`)."""

    added: torch.Tensor | None = None
    rotary: tuple[torch.Tensor, torch.Tensor] | None = None
    attention_bias: torch.Tensor | None = None
    layer_positions: tuple | None = None


class PositionKind(NamedTuple):
    """A position kind whose code is a file of its own: the module that computes its signals, built as
    `module(config, bidirectional, width)` and held by `PositionEncoding` under `attribute` (which names its weights),
    and, for a kind whose self-attention layers each compute their own bias from their query and keys (DeBERTa's),
    that bias and how many terms a score sums (scores are scaled by 1/sqrt(head_dim * terms))."""

    module: type[nn.Module]
    attribute: str
    layer_bias: Callable[..., torch.Tensor] | None = None
    score_terms: Callable[..., int] | None = None


# Filled by the file of a position kind when imported (ALiBi, T5's relative bias, DeBERTa's disentangled
# attention), like `COMPONENTS`.
POSITION_KINDS: dict[str, PositionKind] = {}


def sinusoidal_embedding(position_ids: torch.Tensor, dim: int, dtype: torch.dtype) -> torch.Tensor:
    """Vaswani et al. (2017): sin on the first half of the channels, cos on the second."""
    inv_freq = torch.exp(
        torch.arange(0, dim, 2, device=position_ids.device, dtype=torch.float32) * (-math.log(10000.0) / dim)
    )
    angles = position_ids.float()[..., None] * inv_freq
    return torch.cat([angles.sin(), angles.cos()], dim=-1).to(dtype)


def rotary_angles(position_ids: torch.Tensor, head_dim: int, theta: float, dtype: torch.dtype):
    """cos/sin of RoFormer's rotation angles, [batch, seq, 1, head_dim] (broadcast over heads).

    Computed on the fly, once per forward for all layers: no buffer to re-initialise on load.
    """
    inv_freq = 1.0 / (theta ** (torch.arange(0, head_dim, 2, device=position_ids.device, dtype=torch.float32) / head_dim))
    angles = position_ids.float()[..., None, None] * inv_freq
    angles = torch.cat([angles, angles], dim=-1)
    return angles.cos().to(dtype), angles.sin().to(dtype)


def apply_rotary(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate `states` laid out [batch, seq, heads, head_dim] by the angles of `rotary_angles`."""
    half = states.shape[-1] // 2
    rotated = torch.cat([-states[..., half:], states[..., :half]], dim=-1)
    return states * cos + rotated * sin


def key_minus_query(config, position_ids: torch.Tensor, query_start: int | torch.Tensor, key_length: int):
    """`[query, key]`: each key's cache slot minus each query's, for a position kind that biases the attention
    scores; refuses the kernels that would silently drop such a bias (flash kernels take none)."""
    if config._attn_implementation not in ("eager", "sdpa"):
        raise ValueError(
            f"position_embedding={config.position_embedding!r} adds a bias to the attention scores, which "
            f"attn_implementation={config._attn_implementation!r} does not support; use 'sdpa' or 'eager'."
        )
    device = position_ids.device
    query_slots = torch.arange(position_ids.shape[-1], device=device)[:, None] + query_start
    return torch.arange(key_length, device=device)[None, :] - query_slots


class PositionEncoding(nn.Module):
    """One module for every position scheme, so each family asks for positions the same way."""

    def __init__(self, config, bidirectional: bool, width: int | None = None):
        """`width`: the channels of an embedding added to the input (learned, sinusoidal), `hidden_size` unless
        given (ELECTRA's narrower embeddings)."""
        super().__init__()
        self.kind = config.position_embedding
        self.config = config
        self.width = width or config.hidden_size
        if self.kind == "learned":
            self.embeddings = nn.Embedding(config.max_position_embeddings, self.width)
        elif self.kind in POSITION_KINDS:
            # Shared by all layers of a stack, as T5's bias and DeBERTa's relative embeddings are.
            kind = POSITION_KINDS[self.kind]
            self.add_module(kind.attribute, kind.module(config, bidirectional, self.width))
        elif self.kind not in ("sinusoidal", "rotary", "none"):
            raise ValueError(
                f"position_embedding={self.kind!r} is implemented in a file of its own that this code did not import; "
                "load the model through the module its checkpoint's auto_map names."
            )

    def forward(
        self, position_ids: torch.Tensor, query_start: int | torch.Tensor, key_length: int, dtype: torch.dtype
    ) -> PositionSignals:
        """The signals for queries at cache slots `query_start` onwards (a 0-dim tensor for a static cache) against
        `key_length` keys; `position_ids` are the queries' positions, which skip a row's padding."""
        config = self.config
        if self.kind == "learned":
            # The check reads a tensor's value, which a compiled graph cannot branch on: compiled, an out-of-range
            # position fails in the embedding lookup instead.
            longest = 0 if torch.compiler.is_compiling() or not position_ids.numel() else int(position_ids.max()) + 1
            if longest > config.max_position_embeddings:
                raise ValueError(
                    f"Sequence needs position {longest - 1} but this model has max_position_embeddings="
                    f"{config.max_position_embeddings} (learned positions); truncate the input to at most "
                    f"{config.max_position_embeddings} tokens."
                )
            return PositionSignals(added=self.embeddings(position_ids))
        if self.kind == "sinusoidal":
            return PositionSignals(added=sinusoidal_embedding(position_ids, self.width, dtype))
        if self.kind == "rotary":
            return PositionSignals(rotary=rotary_angles(position_ids, config.head_dim, config.rope_theta, dtype))
        if self.kind in POSITION_KINDS:
            return getattr(self, POSITION_KINDS[self.kind].attribute)(position_ids, query_start, key_length, dtype)
        return PositionSignals()


# ----------------------------------------------------------------------------------------------- feed-forward
# GPT-2's tanh-approximated GELU as PyTorch's single fused kernel: equal to transformers' `gelu_new` (eight
# element-wise ops) to float rounding, several times faster forward and backward, and it saves no intermediates.
FUSED_ACTIVATIONS = {"gelu_new": "gelu_pytorch_tanh"}


class SquaredReLU(torch.autograd.Function):
    """relu(x)², equal bit for bit to transformers' `relu2` (gradients too) in two element-wise passes forward and
    two backward where autograd through relu-then-square runs seven: on a CPU they cost a small model's MLP about as
    much as its matmuls (gpt-speedrun-tiny's training step: 109 ms against 130)."""

    @staticmethod
    def forward(ctx, hidden_states: torch.Tensor) -> torch.Tensor:
        rectified = torch.relu(hidden_states)
        ctx.save_for_backward(rectified)
        return rectified * rectified

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx, grad_output: torch.Tensor) -> torch.Tensor:
        return (ctx.saved_tensors[0] * 2).mul_(grad_output)


class FeedForward(nn.Module):
    """Position-wise MLP; gated variants compute gate and up projections in one fused matmul."""

    def __init__(self, config):
        super().__init__()
        self.gated = config.activation in GATED_ACTIVATIONS
        activation = GATED_ACTIVATIONS.get(config.activation, config.activation)
        fused = SquaredReLU.apply if activation == "relu2" else None
        self.act_fn = fused or ACT2FN[FUSED_ACTIVATIONS.get(activation, activation)]
        width = config.intermediate_size * (2 if self.gated else 1)
        self.up_proj = nn.Linear(config.hidden_size, width, bias=config.mlp_bias)
        self.down_proj = nn.Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)
        self.down_proj.starts_at_zero = config.zero_init_projections  # read by `_init_weights`

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        hidden_states = self.up_proj(hidden_states)
        if self.gated:
            gate, up = hidden_states.chunk(2, dim=-1)
            hidden_states = self.act_fn(gate)
            # Without autograd (inference, generation) the product reuses the activation's buffer: one
            # intermediate-size tensor less at the peak.
            hidden_states = hidden_states * up if hidden_states.requires_grad else hidden_states.mul_(up)
        else:
            hidden_states = self.act_fn(hidden_states)
        return self.down_proj(hidden_states)


class RoutedFeedForward(nn.Module):
    """A feed-forward that returns its router logits beside its output (`mixture_of_experts`, a component file), which
    the models record (`output_router_logits`) to add the load-balancing loss."""


def build_feed_forward(config) -> nn.Module:
    return component("mixture_of_experts")(config) if config.num_experts else FeedForward(config)


# ----------------------------------------------------------------------------------------------- attention
def eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float,
    dropout: float = 0.0,
    position_bias: torch.Tensor | None = None,
    **kwargs,
):
    """Reference attention: explicit softmax, returns the weights (for `output_attentions`)."""
    if module.num_key_value_groups > 1:
        key = key.repeat_interleave(module.num_key_value_groups, dim=1)
        value = value.repeat_interleave(module.num_key_value_groups, dim=1)
    scores = torch.matmul(query, key.transpose(2, 3)) * scaling
    if position_bias is not None:
        scores = scores + position_bias
    if attention_mask is not None:
        if attention_mask.dtype == torch.bool:
            scores = scores.masked_fill(~attention_mask, torch.finfo(scores.dtype).min)
        else:
            scores = scores + attention_mask
    weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(query.dtype)
    weights = F.dropout(weights, p=dropout, training=module.training)
    output = torch.matmul(weights, value).transpose(1, 2).contiguous()
    return output, weights


class Attention(nn.Module):
    """Multi-head, grouped-query or multi-query attention; self- or cross-attention.

    Self-attention projects q, k and v with one fused matmul. The kernel comes from transformers' attention
    registry (`config._attn_implementation`: eager, sdpa, ...), so backends are switched, not re-implemented.
    """

    def __init__(self, config, layer_idx: int, is_causal: bool, is_cross_attention: bool = False):
        super().__init__()
        self.config = config
        self.layer_idx = layer_idx
        self.is_causal = is_causal
        self.is_cross_attention = is_cross_attention
        self.head_dim = config.head_dim
        self.num_heads = config.num_attention_heads
        self.num_key_value_heads = config.num_key_value_heads
        self.num_key_value_groups = self.num_heads // self.num_key_value_heads
        kind = None if is_cross_attention else POSITION_KINDS.get(config.position_embedding)
        self.layer_bias = kind.layer_bias if kind else None
        self.scaling = (self.head_dim * (kind.score_terms(config) if kind and kind.score_terms else 1)) ** -0.5
        self.attention_dropout = config.attention_dropout
        q_width = self.num_heads * self.head_dim
        kv_width = self.num_key_value_heads * self.head_dim
        if is_cross_attention:
            self.q_proj = nn.Linear(config.hidden_size, q_width, bias=config.attention_bias)
            self.kv_proj = nn.Linear(config.hidden_size, 2 * kv_width, bias=config.attention_bias)
        else:
            self.qkv_proj = nn.Linear(config.hidden_size, q_width + 2 * kv_width, bias=config.attention_bias)
        self.o_proj = nn.Linear(q_width, config.hidden_size, bias=config.attention_output_bias)
        self.o_proj.starts_at_zero = config.zero_init_projections  # read by `_init_weights`
        if config.qk_norm and not is_cross_attention:
            self.q_norm = RMSNorm(self.head_dim, config.norm_eps)
            self.k_norm = RMSNorm(self.head_dim, config.norm_eps)
        # What flash kernels, which take no mask, are told of a window; a local encoder layer sets its own.
        self.sliding_window = None if is_cross_attention else config.sliding_window

    def _heads(self, states: torch.Tensor) -> torch.Tensor:
        return states.view(*states.shape[:-1], -1, self.head_dim).transpose(1, 2)

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_signals: PositionSignals | None = None,
        past_key_values: Cache | None = None,
        key_value_states: torch.Tensor | None = None,
        **kwargs,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        position_bias = None
        if self.is_cross_attention:
            query = self._heads(self.q_proj(hidden_states))
            cache = past_key_values.cross_attention_cache if past_key_values is not None else None
            if past_key_values is not None and past_key_values.is_updated.get(self.layer_idx):
                key, value = cache.layers[self.layer_idx].keys, cache.layers[self.layer_idx].values
            else:
                key, value = self._heads(self.kv_proj(key_value_states)).split(self.num_key_value_heads, dim=1)
                if cache is not None:
                    key, value = cache.update(key, value, self.layer_idx)
                    past_key_values.is_updated[self.layer_idx] = True
        else:
            heads = self.qkv_proj(hidden_states)
            heads = heads.view(*heads.shape[:-1], -1, self.head_dim)  # [batch, seq, q + k + v heads, head_dim]
            q_heads, kv_heads = self.num_heads, self.num_key_value_heads
            query_key, value = heads.split((q_heads + kv_heads, kv_heads), dim=-2)
            if self.config.qk_norm:
                query, key = query_key.split((q_heads, kv_heads), dim=-2)
                query_key = torch.cat((self.q_norm(query), self.k_norm(key)), dim=-2)
            if position_signals is not None and position_signals.rotary is not None:
                # Query and key heads are adjacent in the fused projection: one rotation covers both.
                query_key = apply_rotary(query_key, *position_signals.rotary)
            query, key = query_key.split((q_heads, kv_heads), dim=-2)
            query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
            if position_signals is not None:
                position_bias = position_signals.attention_bias
            if past_key_values is not None:
                if isinstance(past_key_values, EncoderDecoderCache):
                    past_key_values = past_key_values.self_attention_cache
                key, value = past_key_values.update(key, value, self.layer_idx)
            if position_signals is not None and position_signals.layer_positions is not None:
                position_bias = self.layer_bias(self, query, key, position_signals.layer_positions)

        attention_interface: Callable = ALL_ATTENTION_FUNCTIONS.get_interface(
            self.config._attn_implementation, eager_attention_forward
        )
        output, weights = attention_interface(
            self,
            query,
            key,
            value,
            attention_mask,
            dropout=self.attention_dropout if self.training else 0.0,
            scaling=self.scaling,
            is_causal=self.is_causal,
            position_bias=position_bias,
            sliding_window=self.sliding_window,
            **kwargs,
        )
        output = output.reshape(*output.shape[:-2], -1)
        return self.o_proj(output), weights


# ----------------------------------------------------------------------------------------------- block
def active_dropout(dropout: nn.Dropout, hidden_states: torch.Tensor) -> torch.Tensor:
    """`dropout(hidden_states)` only where it does something (training with p > 0): called two or three times per
    layer and decoding step, the identity module call is Python overhead on generation's hot path."""
    return dropout(hidden_states) if dropout.training and dropout.p else hidden_states


class TransformerBlock(GradientCheckpointingLayer):
    """Self-attention, optional cross-attention, feed-forward; pre- or post-norm residual branches.

    The same block is the GPT/Llama decoder layer (causal), the BERT layer (bidirectional) and the
    T5/BART decoder layer (causal + cross-attention).
    """

    def __init__(self, config, layer_idx: int, is_causal: bool, has_cross_attention: bool = False):
        super().__init__()
        self.pre_norm = config.norm_position == "pre"
        self.self_attn = Attention(config, layer_idx, is_causal=is_causal)
        self.self_attn_norm = build_norm(config)
        if has_cross_attention:
            self.cross_attn = Attention(config, layer_idx, is_causal=False, is_cross_attention=True)
            self.cross_attn_norm = build_norm(config)
        self.mlp = build_feed_forward(config)
        self.mlp_norm = build_norm(config)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def _residual(self, hidden_states: torch.Tensor, norm: nn.Module, branch) -> torch.Tensor:
        if self.pre_norm:
            return hidden_states + active_dropout(self.dropout, branch(norm(hidden_states)))
        return norm(hidden_states + active_dropout(self.dropout, branch(hidden_states)))

    def forward(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        position_signals: PositionSignals | None = None,
        past_key_values: Cache | None = None,
        encoder_hidden_states: torch.Tensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        **kwargs,
    ) -> torch.Tensor:
        hidden_states = self._residual(
            hidden_states,
            self.self_attn_norm,
            lambda x: self.self_attn(x, attention_mask, position_signals, past_key_values, **kwargs)[0],
        )
        if encoder_hidden_states is not None:
            hidden_states = self._residual(
                hidden_states,
                self.cross_attn_norm,
                lambda x: self.cross_attn(
                    x, encoder_attention_mask, None, past_key_values, key_value_states=encoder_hidden_states, **kwargs
                )[0],
            )
        return self._residual(hidden_states, self.mlp_norm, self._feed_forward)

    def _feed_forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        output = self.mlp(hidden_states)
        # Router logits are recorded by the model's output capture (index 1 of the MoE output).
        return output[0] if isinstance(output, tuple) else output


