"""LoRA as a composable method: `delta(x) = x @ A.T @ B.T * scaling`, from the module input.

Stacked as `A [M+1, R, in]` and `Bt [M+1, R, out]` (B transposed, each adapter's scaling folded in); ranks are
zero-padded to the largest R, and zero rows/columns add exactly nothing. The scaling is PEFT's (`lora_alpha / r`,
or `/ sqrt(r)` with rsLoRA, per-module `alpha_pattern`), read by PEFT's own pattern matcher.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from peft import LoraConfig
from peft.utils.other import get_pattern_key
from torch import nn

from .base import MethodStack, expect_shape, frozen, linear_module_shape

# LoRA options that leave a saved adapter an additive low-rank delta (or that are read below: rank, alpha, rsLoRA,
# per-module patterns). Every other option must be at LoraConfig's default, else `read_adapter` names it.
_HARMLESS_OPTIONS = {
    "task_type", "peft_type", "auto_mapping", "peft_version", "base_model_name_or_path", "revision", "inference_mode",
    "r", "target_modules", "exclude_modules", "lora_alpha", "lora_dropout", "fan_in_fan_out", "use_rslora",
    "modules_to_save", "init_lora_weights", "layers_to_transform", "layers_pattern", "rank_pattern", "alpha_pattern",
    "megatron_core", "eva_config", "runtime_config", "qalora_group_size", "ensure_weight_tying", "loftq_config",
}
_WHY_UNSUPPORTED = {
    "use_dora": "DoRA rescales the whole adapted weight by a learned magnitude, not an additive low-rank delta",
    "bias": "the adapter trained the base model's biases, which a composition keeps frozen and shared",
    "lora_bias": "a bias on lora_B is not part of the stacked low-rank product",
    "target_parameters": "LoRA on raw parameters (e.g. fused expert weights) adapts no module",
    "trainable_token_indices": "trained embedding rows are not a per-module delta",
    "layer_replication": "it changes the base model's layer structure",
}
# Initialisations that also rewrite the base weights: such an adapter is only valid on that rewritten base.
_PLAIN_INITS = (True, False, "gaussian", "eva", "orthogonal")


@dataclass
class LoraFactors:
    """One module's LoRA: `delta(x) = x @ A.T @ B.T * scaling`."""

    A: torch.Tensor  # [r, in]
    B: torch.Tensor  # [out, r]
    scaling: float


class StackedLoRA(MethodStack):
    """The LoRA factors of M adapters on one module; slot M is zero (no adapter)."""

    peft_type = "LORA"
    factor_key = re.compile(r"(?P<module>.+)\.(?P<part>lora_A|lora_B)\.weight")
    rank_part = "lora_A"
    linear_in_input = True
    config_class, supported_options, why_unsupported = LoraConfig, _HARMLESS_OPTIONS, _WHY_UNSUPPORTED

    @classmethod
    def check_options(cls, adapter: str, config: dict) -> None:
        init = config.get("init_lora_weights", True)
        if init not in _PLAIN_INITS:
            raise ValueError(
                f"adapter {adapter!r} uses the LoRA option init_lora_weights={init!r}, which rewrites the base "
                "model's weights at initialisation: the adapter only holds on that rewritten base. Convert it to a "
                "plain LoRA first (PEFT: save_pretrained(..., path_initial_model_for_weight_conversion=...))."
            )
        super().check_options(adapter, config)

    @classmethod
    def read_factors(cls, adapter: str, config: dict, path: str, parts: dict[str, torch.Tensor]) -> LoraFactors:
        alpha_pattern = config.get("alpha_pattern") or {}
        alpha = alpha_pattern.get(get_pattern_key(alpha_pattern.keys(), path), config["lora_alpha"])
        rank = parts["lora_A"].shape[0]
        scaling = alpha / math.sqrt(rank) if config.get("use_rslora") else alpha / rank
        return LoraFactors(parts["lora_A"], parts["lora_B"], scaling)

    @classmethod
    def check_fits(cls, adapter: str, path: str, module: nn.Module, model: nn.Module, factors: LoraFactors) -> None:
        out_features, in_features = linear_module_shape(adapter, path, module, "LoRA")
        rank = factors.A.shape[0]
        expect_shape(adapter, path, "lora_A", (rank, in_features), factors.A)
        expect_shape(adapter, path, "lora_B", (out_features, rank), factors.B)

    def __init__(self, factors: list[LoraFactors], base: nn.Module, path: str) -> None:
        super().__init__()
        like = next(base.parameters())
        self.size, self.rank = len(factors), max(f.A.shape[0] for f in factors)
        in_features, out_features = factors[0].A.shape[1], factors[0].B.shape[0]
        A = torch.zeros(self.size + 1, self.rank, in_features)
        Bt = torch.zeros(self.size + 1, self.rank, out_features)
        for slot, f in enumerate(factors):
            rank = f.A.shape[0]
            A[slot, :rank] = f.A.float()
            Bt[slot, :rank] = (f.B.float() * f.scaling).T
        self.A = frozen(A.to(like.device, like.dtype))
        self.Bt = frozen(Bt.to(like.device, like.dtype))
        self.gathered_per_row = self.rank * (in_features + out_features)

    def hidden(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`x @ A_n.T` for every adapter: [..., M, R], one matmul of width M*R."""
        return F.linear(x, self.input_map()).unflatten(-1, (self.size, self.rank))

    def combine(self, hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        return (hidden * weights.unsqueeze(-1)).flatten(-2) @ self.Bt[: self.size].flatten(0, 1)

    @property
    def num_directions(self) -> int:
        return self.size * self.rank

    def key_directions(self) -> torch.Tensor:
        """[M*R, out]: `delta_n = hidden_n @ rows_n` (the rows of B_n^T, scaled)."""
        return self.Bt[: self.size].flatten(0, 1)

    def score(self, hidden: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        return (projected.unflatten(-1, (self.size, self.rank)) * hidden).sum(-1)

    def select_grouped(self, x: torch.Tensor, y: torch.Tensor, groups) -> torch.Tensor:
        hidden = F.grouped_mm(x.index_select(0, groups.rows), self.A.transpose(1, 2), offs=groups.offsets)
        if groups.weights is not None:
            hidden = hidden * groups.weights
        return F.grouped_mm(hidden, self.Bt, offs=groups.offsets)

    def select(
        self, x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        rows, k = slots.shape
        chosen = slots.flatten()
        # index_select of whole flattened slots: a row copy each, cheaper than advanced indexing's element gather
        A = self.A.flatten(1).index_select(0, chosen).view(rows, k * self.rank, -1)
        Bt = self.Bt.flatten(1).index_select(0, chosen).view(rows, k * self.rank, -1)
        hidden = torch.bmm(x, A.transpose(1, 2))
        if weights is not None:
            hidden = (hidden.unflatten(-1, (k, self.rank)) * weights[:, None, :, None]).flatten(-2)
        return torch.bmm(hidden, Bt)

    def input_map(self) -> torch.Tensor:
        return self.A[: self.size].flatten(0, 1)
