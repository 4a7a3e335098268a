"""IA3 as a composable method: a learned vector l rescales a linear module's output (`y * l`), or its input for
PEFT's `feedforward_modules` (`W (x * l) + b`).

Written as a delta, `y * (l - 1)` or `W (x * (l - 1))`, so it composes like the other methods: the stack holds
`l_n - 1` as `[M+1, features]` (slot M zero), `hidden` is the tensor being scaled (shared by all adapters), and the
weighted sum of the adapters is one scaling vector per row. The key directions are the identity (output scaling) or
the rows of W^T (input scaling), shared by all adapters. Input scaling costs one extra product with the base weight
(the base module has already run on the unscaled input when the stack sees it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peft import IA3Config
from torch import nn

from .base import MethodStack, expect_shape, frozen, linear_module_shape


@dataclass
class IA3Factors:
    """One module's IA3 vector as PEFT saves it: `[1, in]` scales the input (feedforward), `[out, 1]` the output."""

    vector: torch.Tensor

    @property
    def scales_input(self) -> bool:
        return self.vector.shape[0] == 1 and self.vector.shape[1] != 1


class StackedIA3(MethodStack):
    """The IA3 vectors (minus one) of M adapters on one module, all scaling its input or all its output."""

    peft_type = "IA3"
    factor_key = re.compile(r"(?P<module>.+)\.(?P<part>ia3_l)")
    config_class = IA3Config  # every IA3 option reads the same from the saved vectors

    @classmethod
    def read_factors(cls, adapter: str, config: dict, path: str, parts: dict[str, torch.Tensor]) -> IA3Factors:
        return IA3Factors(parts["ia3_l"])

    @classmethod
    def check_fits(cls, adapter: str, path: str, module: nn.Module, model: nn.Module, factors: IA3Factors) -> None:
        out_features, in_features = linear_module_shape(adapter, path, module, "IA3")
        expected = (1, in_features) if factors.scales_input else (out_features, 1)
        expect_shape(adapter, path, "ia3_l", expected, factors.vector)

    def __init__(self, factors: list[IA3Factors], base: nn.Module, path: str) -> None:
        super().__init__()
        modes = {f.scales_input for f in factors}
        if len(modes) > 1:
            raise ValueError(
                f"IA3 adapters on {path} scale its input (feedforward_modules) in some adapters and its output in "
                "others; they cannot be stacked"
            )
        self.scales_input = modes.pop()
        like = next(base.parameters())
        self.size = len(factors)
        vectors = torch.zeros(self.size + 1, factors[0].vector.numel())
        for slot, f in enumerate(factors):
            vectors[slot] = f.vector.float().flatten() - 1
        self.vectors = frozen(vectors.to(like.device, like.dtype))
        self.gathered_per_row = vectors.shape[1]
        # the base module itself, not a submodule: its weight stays the base model's parameter, counted once
        object.__setattr__(self, "base", base)

    def _base_weight(self) -> torch.Tensor:
        """W as [out, in] (Conv1D stores it transposed)."""
        weight = self.base.weight
        return weight if isinstance(self.base, nn.Linear) else weight.T

    def _delta(self, scaled: torch.Tensor) -> torch.Tensor:
        return F.linear(scaled, self._base_weight()) if self.scales_input else scaled

    def hidden(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """The tensor being scaled, x or y (every adapter scales the same one)."""
        return x if self.scales_input else y

    def combine(self, hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return self._delta(hidden * (weights @ self.vectors[: self.size]))

    @property
    def num_directions(self) -> int:
        return self.vectors.shape[1]

    def key_directions(self) -> torch.Tensor:
        """`delta_n = (hidden * (l_n - 1)) @ directions`: W^T for input scaling, the identity for output scaling."""
        if self.scales_input:
            return self._base_weight().T
        return torch.eye(self.num_directions, device=self.vectors.device, dtype=self.vectors.dtype)

    def score(self, hidden: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        return (projected * hidden) @ self.vectors[: self.size].T

    def select_grouped(self, x: torch.Tensor, y: torch.Tensor, groups) -> torch.Tensor:
        scale = self.vectors[groups.slots]
        if groups.weights is not None:
            scale = scale * groups.weights
        return self._delta(self.hidden(x, y).index_select(0, groups.rows) * scale)

    def select(
        self, x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        scale = self.vectors[slots]  # [n, k, features]
        scale = scale[:, 0] if weights is None else (scale * weights.unsqueeze(-1)).sum(1)
        return self._delta(self.hidden(x, y) * scale.unsqueeze(1))
