"""Bottleneck adapters (hfzoo's PEFT method, `hfzoo.adapters.bottleneck`) as a composable method.

On the module output y: `delta(y) = up(act(down(norm(y)))) * scaling`, the function of `BottleneckLayer`, with its
LayerNorm epsilon and `BottleneckConfig`'s defaults. Stacked as down `[M+1, W, d]` + bias, up (transposed, scaled)
`[M+1, W, d]` + bias, LayerNorm affine `[M+1, d]`; widths are zero-padded to the largest W.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, fields

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN

from ...bottleneck.config import BottleneckConfig
from ...bottleneck.layer import NORM_EPS
from .base import MethodStack, expect_shape, frozen, output_width

_DEFAULTS = {f.name: f.default for f in fields(BottleneckConfig)}


@dataclass
class BottleneckFactors:
    """One module's bottleneck adapter on the module output y: `delta(y) = up(act(down(norm(y)))) * scaling`."""

    down_weight: torch.Tensor  # [width, d]
    down_bias: torch.Tensor
    up_weight: torch.Tensor  # [d, width]
    up_bias: torch.Tensor
    norm_weight: torch.Tensor | None
    norm_bias: torch.Tensor | None
    activation: str
    scaling: float


class StackedBottleneck(MethodStack):
    """The bottleneck adapters of M adapters on one module (same activation); slot M is zero (no adapter)."""

    peft_type = "BOTTLENECK"
    factor_key = re.compile(r"(?P<module>.+)\.(?P<part>bottleneck_(down|up|norm)\.(weight|bias))")
    config_class = BottleneckConfig
    rank_part = "bottleneck_down.weight"

    @classmethod
    def read_factors(cls, adapter: str, config: dict, path: str, parts: dict[str, torch.Tensor]) -> BottleneckFactors:
        return BottleneckFactors(
            parts["bottleneck_down.weight"], parts["bottleneck_down.bias"],
            parts["bottleneck_up.weight"], parts["bottleneck_up.bias"],
            parts.get("bottleneck_norm.weight"), parts.get("bottleneck_norm.bias"),
            config.get("activation", _DEFAULTS["activation"]), float(config.get("scaling", _DEFAULTS["scaling"])),
        )

    @classmethod
    def check_fits(
        cls, adapter: str, path: str, module: nn.Module, model: nn.Module, factors: BottleneckFactors
    ) -> None:
        width, d = factors.down_weight.shape[0], output_width(module, model)
        expect_shape(adapter, path, "bottleneck_down.weight", (width, d), factors.down_weight)
        expect_shape(adapter, path, "bottleneck_up.weight", (d, width), factors.up_weight)

    def __init__(self, factors: list[BottleneckFactors], base: nn.Module, path: str) -> None:
        super().__init__()
        activations = sorted({f.activation for f in factors})
        if len(activations) > 1:
            raise ValueError(
                f"bottleneck adapters on {path} use different activations {activations}; they cannot be stacked"
            )
        self.act = ACT2FN[activations[0]]
        self.size, self.width = len(factors), max(f.down_weight.shape[0] for f in factors)
        d = factors[0].down_weight.shape[1]
        down, up_t = torch.zeros(self.size + 1, self.width, d), torch.zeros(self.size + 1, self.width, d)
        down_bias, up_bias = torch.zeros(self.size + 1, self.width), torch.zeros(self.size + 1, d)
        norm_weight, norm_bias = torch.ones(self.size + 1, d), torch.zeros(self.size + 1, d)
        has_norm = torch.zeros(self.size + 1, dtype=torch.bool)
        for slot, f in enumerate(factors):
            width = f.down_weight.shape[0]
            down[slot, :width], down_bias[slot, :width] = f.down_weight.float(), f.down_bias.float()
            up_t[slot, :width], up_bias[slot] = (f.up_weight.float() * f.scaling).T, f.up_bias.float() * f.scaling
            if f.norm_weight is not None:
                norm_weight[slot], norm_bias[slot], has_norm[slot] = f.norm_weight.float(), f.norm_bias.float(), True
        like = next(base.parameters())
        place = dict(device=like.device, dtype=like.dtype)
        self.down, self.down_bias = frozen(down.to(**place)), frozen(down_bias.to(**place))
        self.up_t, self.up_bias = frozen(up_t.to(**place)), frozen(up_bias.to(**place))
        self.uses_norm = bool(has_norm.any())
        self.norm_weight, self.norm_bias = frozen(norm_weight.to(**place)), frozen(norm_bias.to(**place))
        self.register_buffer("has_norm", has_norm.to(like.device), persistent=False)
        self.gathered_per_row = 2 * self.width * d

    def _inputs(self, y: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Each adapter's input, [..., K, d] for `slots` [K] (or [n, 1, k] against y [n, T, d]): y, or its
        LayerNorm with that adapter's affine."""
        normed = F.layer_norm(y, y.shape[-1:], eps=NORM_EPS).unsqueeze(-2)
        # addcmul rounds like LayerNorm's fused affine, so a single adapter matches PEFT's output bit for bit
        normed = torch.addcmul(self.norm_bias[slots], normed, self.norm_weight[slots])
        return torch.where(self.has_norm[slots].unsqueeze(-1), normed, y.unsqueeze(-2))

    def hidden(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`act(down_n(norm_n(y)))` for every adapter: [..., M, W]."""
        members = slice(0, self.size)
        if not self.uses_norm:
            down = F.linear(y, self.down[members].flatten(0, 1), self.down_bias[members].flatten())
            return self.act(down.unflatten(-1, (self.size, self.width)))
        inputs = self._inputs(y, torch.arange(self.size, device=y.device))
        return self.act(torch.einsum("...md,mwd->...mw", inputs, self.down[members]) + self.down_bias[members])

    def combine(self, hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        up_t, up_bias = self.up_t[: self.size].flatten(0, 1), self.up_bias[: self.size]
        return (hidden * weights.unsqueeze(-1)).flatten(-2) @ up_t + weights @ up_bias

    @property
    def num_directions(self) -> int:
        return self.size * (self.width + 1)

    def key_directions(self) -> torch.Tensor:
        """[M*W + M, d]: `delta_n = hidden_n @ up rows_n + up bias_n`, so the up rows and then one bias row each."""
        return torch.cat([self.up_t[: self.size].flatten(0, 1), self.up_bias[: self.size]])

    def score(self, hidden: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        up, bias = projected.split([self.size * self.width, self.size], dim=-1)
        return (up.unflatten(-1, (self.size, self.width)) * hidden).sum(-1) + bias

    def select_grouped(self, x: torch.Tensor, y: torch.Tensor, groups) -> torch.Tensor:
        inputs = y.index_select(0, groups.rows)
        if self.uses_norm:
            inputs = self._inputs(inputs, groups.slots.unsqueeze(-1)).squeeze(-2)
        down = F.grouped_mm(inputs, self.down.transpose(1, 2), offs=groups.offsets)
        hidden, up_bias = self.act(down + self.down_bias[groups.slots]), self.up_bias[groups.slots]
        if groups.weights is not None:
            hidden, up_bias = hidden * groups.weights, up_bias * groups.weights
        return F.grouped_mm(hidden, self.up_t, offs=groups.offsets) + up_bias

    def select(
        self, x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        """Every (row, choice) pair is one batch entry of `baddbmm` (an einsum over [n, T, k, ...] was several
        times slower)."""
        rows, k = slots.shape
        chosen = slots.flatten()
        if self.uses_norm:
            inputs = self._inputs(y, slots.unsqueeze(1)).transpose(1, 2).flatten(0, 1)  # [n*k, T, d]
        else:
            inputs = y if k == 1 else y.repeat_interleave(k, dim=0)
        down_bias, up_bias = self.down_bias[chosen].unsqueeze(1), self.up_bias[chosen].unsqueeze(1)
        hidden = self.act(torch.baddbmm(down_bias, inputs, self.down[chosen].transpose(1, 2)))
        if weights is not None:
            scale = weights.reshape(-1, 1, 1)
            hidden, up_bias = hidden * scale, up_bias * scale
        delta = torch.baddbmm(up_bias, hidden, self.up_t[chosen])
        return delta if k == 1 else delta.unflatten(0, (rows, k)).sum(1)
