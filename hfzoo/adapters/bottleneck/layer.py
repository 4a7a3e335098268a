"""The bottleneck adapter layer: wraps a sub-layer's output module and adds `up(act(down(norm(h)))) * scaling`.

Per-adapter weights live in `ModuleDict`s keyed by adapter name, one level deep (`bottleneck_down.<adapter>.weight`),
because PEFT derives checkpoint keys by removing the adapter name from exactly that position.
"""

from __future__ import annotations

from typing import Any

import torch
from peft.tuners.tuners_utils import BaseTunerLayer
from torch import nn
from transformers.activations import ACT2FN

from ...integrations.peft import cast_input_dtype
from ..rows import SlotGroups
from .config import BottleneckConfig

MERGE_ERROR = (
    "Bottleneck adapters cannot be merged into the base weights: the adapter adds up(act(down(h))) with a "
    "non-linear activation (and optional LayerNorm) applied to the wrapped layer's OUTPUT, which no change of that "
    "layer's weight matrix can reproduce. Keep the PeftModel for inference, or call `unload()` to get the unchanged "
    "base model back."
)

# The init of Houlsby et al. (2019): small random down projection, zero up projection => identity at init.
DOWN_INIT_STD = 0.01
# LayerNorm's epsilon on the adapter input (nn.LayerNorm's default); compositions stacking these adapters use it too.
NORM_EPS = 1e-5


class BottleneckLayer(nn.Module, BaseTunerLayer):
    """Adapter wrapper around any module whose (first) output is hidden states of width `out_features`.

    Several active adapters are applied in parallel (`h + sum_i adapter_i(h)`), the same rule the mixed-batch path
    uses per row. Modules that return a tuple (a mixture-of-experts block returning router logits beside its output)
    get the adapter on the first element.
    """

    adapter_layer_names = ("bottleneck_down", "bottleneck_up", "bottleneck_norm")
    other_param_names = ("bottleneck_act", "bottleneck_dropout", "bottleneck_scaling")

    def __init__(self, base_layer: nn.Module, adapter_name: str, config: BottleneckConfig, out_features: int) -> None:
        super().__init__()
        self.base_layer = base_layer
        self.out_features = out_features
        self.bottleneck_down = nn.ModuleDict()
        self.bottleneck_up = nn.ModuleDict()
        self.bottleneck_norm = nn.ModuleDict()
        self.bottleneck_act = nn.ModuleDict()
        self.bottleneck_dropout = nn.ModuleDict()
        self.bottleneck_scaling: dict[str, float] = {}
        self.merged_adapters = []
        # Through BaseTunerLayer's public setters, not its private fields: the new adapter is the active one, and
        # adapters are enabled.
        self.set_adapter(adapter_name)
        self.enable_adapters(True)
        self.update_layer(adapter_name, config)

    def update_layer(self, adapter_name: str, config: BottleneckConfig) -> None:
        """Create (or re-create) the weights of `adapter_name`."""
        width = max(1, self.out_features // config.reduction_factor)
        # Created where the wrapped weights are: the wrapped module may have no `weight` (a mixture-of-experts block),
        # so PEFT's `_move_adapter_to_device_of_base_layer` could not place them.
        reference = next(self.get_base_layer().parameters())
        placement = {"device": reference.device, "dtype": reference.dtype if reference.is_floating_point() else None}
        self.bottleneck_norm[adapter_name] = (
            nn.LayerNorm(self.out_features, eps=NORM_EPS, **placement) if config.layer_norm else nn.Identity()
        )
        self.bottleneck_down[adapter_name] = nn.Linear(self.out_features, width, **placement)
        self.bottleneck_up[adapter_name] = nn.Linear(width, self.out_features, **placement)
        self.bottleneck_act[adapter_name] = ACT2FN[config.activation]
        self.bottleneck_dropout[adapter_name] = nn.Dropout(config.dropout) if config.dropout else nn.Identity()
        self.bottleneck_scaling[adapter_name] = config.scaling
        self.reset_parameters(adapter_name, config.init_weights)
        self.set_adapter(self.active_adapters)

    @torch.no_grad()
    def reset_parameters(self, adapter_name: str, near_identity: bool) -> None:
        down, up = self.bottleneck_down[adapter_name], self.bottleneck_up[adapter_name]
        if down.weight.is_meta:  # created under low_cpu_mem_usage; the checkpoint fills it
            return
        nn.init.normal_(down.weight, std=DOWN_INIT_STD)
        nn.init.zeros_(down.bias)
        if near_identity:
            nn.init.zeros_(up.weight)
        else:
            nn.init.normal_(up.weight, std=DOWN_INIT_STD)
        nn.init.zeros_(up.bias)

    def adapter_delta(self, adapter_name: str, hidden: torch.Tensor) -> torch.Tensor:
        """The adapter's residual contribution for `hidden` (in `hidden`'s dtype)."""
        down = self.bottleneck_down[adapter_name]
        x = cast_input_dtype(self, hidden, down.weight.dtype)
        x = self.bottleneck_act[adapter_name](down(self.bottleneck_norm[adapter_name](x)))
        x = self.bottleneck_up[adapter_name](self.bottleneck_dropout[adapter_name](x))
        return (x * self.bottleneck_scaling[adapter_name]).to(hidden.dtype)

    def forward(self, x: torch.Tensor, *args: Any, adapter_names: list[str] | None = None, **kwargs: Any) -> Any:
        output = self.base_layer(x, *args, **kwargs)
        if self.disable_adapters:
            return output
        hidden = output[0] if isinstance(output, tuple) else output
        if adapter_names is None:
            deltas = [self.adapter_delta(name, hidden) for name in self.active_adapters if name in self.bottleneck_down]
            adapted = sum(deltas, hidden)
        else:
            adapted = self._mixed_batch_forward(hidden, adapter_names)
        return (adapted, *output[1:]) if isinstance(output, tuple) else adapted

    def _mixed_batch_forward(self, hidden: torch.Tensor, adapter_names: list[str]) -> torch.Tensor:
        """Row i gets adapter `adapter_names[i]` ("__base__", or an adapter that does not wrap this module: none).
        Rows are grouped per adapter (`SlotGroups`, as composed adapters group token rows), so each adapter runs
        once on its sub-batch with its own modules (dropout and all); `index_add` (out of place) keeps this
        differentiable for training."""
        if len(adapter_names) != hidden.shape[0]:
            raise ValueError(
                f"`adapter_names` has {len(adapter_names)} entries for a batch of {hidden.shape[0]} rows; pass one "
                "adapter name (or '__base__') per example."
            )
        names = list(self.bottleneck_down)
        slot_of = {name: slot for slot, name in enumerate(names)}
        slots = torch.tensor([slot_of.get(name, len(names)) for name in adapter_names], device=hidden.device)
        groups = SlotGroups.of(slots.unsqueeze(1), None, len(names) + 1)
        adapted = hidden
        for name, rows in zip(names, groups.per_slot()):
            if len(rows):
                adapted = adapted.index_add(0, rows, self.adapter_delta(name, hidden.index_select(0, rows)))
        return adapted

    def merge(self, safe_merge: bool = False, adapter_names: list[str] | None = None) -> None:
        raise ValueError(MERGE_ERROR)

    def __repr__(self) -> str:
        return "bottleneck." + super().__repr__()
