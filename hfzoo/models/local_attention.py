"""ModernBERT's alternating attention (Warner et al., 2024): most layers attend only to a window of nearby tokens
(Beltagy et al., 2020's local attention, both sides), every n-th layer to the whole sequence, and the local layers
rotate by their own rotary base.

The window is an extra condition on the bidirectional mask (transformers' `and_mask_function`), so every attention
kernel that takes a mask applies it; flash kernels, which take no mask, get the window as their `sliding_window`.
A component file (`layers.COMPONENTS`): only checkpoints whose config has local layers carry it.
"""

from collections.abc import Callable

import torch
from torch import nn
from transformers.masking_utils import create_bidirectional_mask

from .layers import COMPONENTS, PositionSignals, rotary_angles

__all__ = ["LocalAttention"]


def window_overlay(half_window: int) -> Callable:
    """A mask function: query and key at most `half_window` positions apart (ModernBERT's `local_attention // 2`)."""

    def within_window(batch_idx, head_idx, q_idx, kv_idx):
        return abs(q_idx - kv_idx) <= half_window

    return within_window


def local_attention_inputs(
    config,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None,
    position_ids: torch.Tensor | None,
    signals: PositionSignals,
) -> tuple[torch.Tensor | None, PositionSignals]:
    """The mask and position signals of the local layers: the padding mask within the window, and rotary angles of
    `config.local_rope_theta` where it is set (else the global layers' signals)."""
    mask = create_bidirectional_mask(
        config=config,
        inputs_embeds=hidden_states,
        attention_mask=attention_mask,
        and_mask_function=window_overlay(config.local_attention_window // 2),
    )
    if config.local_rope_theta is not None:
        if position_ids is None:
            position_ids = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None]
        # Rotary positions give nothing else (`local_rope_theta` needs them).
        signals = PositionSignals(
            rotary=rotary_angles(position_ids, config.head_dim, config.local_rope_theta, hidden_states.dtype)
        )
    return mask, signals


class LocalAttention:
    """The encoder's local layers (`local_attention_window`): each one's window for flash kernels (inclusive, as
    ModernBERT gives it), set on the layers when built, and their inputs, which `TransformerStack.run_stack` asks for
    (`local_attention_inputs`). Holds no weights."""

    def __init__(self, config, layers: nn.ModuleList):
        self.config = config
        for index, layer in enumerate(layers):
            if config.is_local_layer(index):
                layer.self_attn.sliding_window = config.local_attention_window // 2 + 1

    def __call__(
        self,
        hidden_states: torch.Tensor,
        attention_mask: torch.Tensor | None,
        position_ids: torch.Tensor | None,
        signals: PositionSignals,
    ) -> tuple[torch.Tensor | None, PositionSignals]:
        return local_attention_inputs(self.config, hidden_states, attention_mask, position_ids, signals)


COMPONENTS["local_attention"] = LocalAttention
