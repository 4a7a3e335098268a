"""What every adapter method declares to be composable (`MethodStack`), and the shape checks they share.

A method's stack holds the factors of M adapters of that method on one base module, padded to a common size, with
slot M meaning "no adapter" (it contributes exactly zero), so that rows routed to no adapter take the same gather
as all others. Compositions only ever call the batched operations below, which is what keeps every strategy free
of Python loops over adapters:

- `hidden(x, y)`: all M adapters' hidden states at once from the module input x and output y;
- `combine(hidden, weights)`: `sum_n weights_n * delta_n`, one product back to the output width;
- `key_directions()` and `score(hidden, projected)`: `delta_n = hidden_n @ directions`, the view AdapterFusion
  needs to score every adapter without materialising the deltas;
- `select(x, y, slots, weights)` and `select_grouped(x, y, groups)`: only the chosen adapters, gathered per row or
  grouped by slot, so the cost does not grow with M.
"""

from __future__ import annotations

import dataclasses
import re
from typing import Any, ClassVar

import torch
from torch import nn
from transformers.pytorch_utils import Conv1D


def frozen(tensor: torch.Tensor) -> nn.Parameter:
    """A stacked adapter weight: a parameter (it follows `.to()` and counts as the model's) that never trains."""
    return nn.Parameter(tensor, requires_grad=False)


def linear_shape(module: nn.Module) -> tuple[int, int] | None:
    """(out_features, in_features) of an `nn.Linear` or transformers' `Conv1D` (GPT-2); None for other modules."""
    if isinstance(module, nn.Linear):
        return module.out_features, module.in_features
    if isinstance(module, Conv1D):
        return module.nf, module.weight.shape[0]
    return None


def output_width(module: nn.Module, model: nn.Module) -> int:
    """Width of a module's (first) output: a linear layer's out_features, else the model's hidden size."""
    shape = linear_shape(module)
    return shape[0] if shape else model.config.hidden_size


def expect_shape(adapter: str, path: str, what: str, expected: tuple, tensor: torch.Tensor) -> None:
    """Raise an error naming the module, the expected and the found shape where they differ."""
    if tuple(tensor.shape) != tuple(expected):
        raise ValueError(
            f"adapter {adapter!r} does not fit the base model at {path}: expected {what} of shape "
            f"{list(expected)}, found {list(tensor.shape)}"
        )


def linear_module_shape(adapter: str, path: str, module: nn.Module, method: str) -> tuple[int, int]:
    """`linear_shape(module)`, or an error saying that `method` adapts linear layers only."""
    shape = linear_shape(module)
    if shape is None:
        raise ValueError(
            f"adapter {adapter!r} has {method} on {path}, a {type(module).__name__}; compositions stack {method} on "
            "nn.Linear and Conv1D layers only"
        )
    return shape


def check_options(
    adapter: str, config: dict, config_cls: type, supported: set[str] | None = None, why: dict[str, str] | None = None
) -> None:
    """Options outside `supported` (default: all of `config_cls`'s fields) must be unset or at `config_cls`'s
    default; options `config_cls` does not know (a newer PEFT) must be unset. `why` explains refused options."""
    defaults = {
        f.name: f.default if f.default is not dataclasses.MISSING else f.default_factory()
        for f in dataclasses.fields(config_cls)
        if f.default is not dataclasses.MISSING or f.default_factory is not dataclasses.MISSING
    }
    supported = set(defaults) if supported is None else supported
    for option, value in config.items():
        if option in supported or not value or value == defaults.get(option):
            continue
        reason = (why or {}).get(option, "compositions do not implement it")
        raise ValueError(
            f"adapter {adapter!r} uses the option {option}={value!r}, which compose() does not support: {reason}."
        )


class MethodStack(nn.Module):
    """The adapters of one PEFT method on one base module, stacked (see the module docstring).

    A subclass declares its method: `peft_type` (as in `adapter_config.json`), `factor_key` (matches a saved
    tensor key, PEFT's prefix removed, with groups `module` and `part`), the options it implements, and the class
    methods that read and check one adapter's factors. It is built as `Stack(factors, base_module, path)` from the
    factors of M adapters on the module at `path`. x is the module input [..., in], y its base output [..., out].
    """

    peft_type: ClassVar[str]
    factor_key: ClassVar[re.Pattern]
    config_class: ClassVar[type]  # the method's PEFT config: options left at its defaults are always accepted
    supported_options: ClassVar[set[str] | None] = None  # the other options the stack implements (None: all)
    why_unsupported: ClassVar[dict[str, str]] = {}  # option -> why the stack cannot implement it
    # the saved part whose first dimension is an adapter's size, recorded as its rank (LoRA's rank, a bottleneck's
    # width); None: 1 (IA3's vector)
    rank_part: ClassVar[str | None] = None
    linear_in_input: ClassVar[bool] = False  # `input_map` exists
    size: int  # M, the adapters stacked here
    gathered_per_row: int  # values `select` copies per chosen slot of a row

    # ------------------------------------------------------------------------------------------- one adapter
    @classmethod
    def check_options(cls, adapter: str, config: dict) -> None:
        """Raise an error naming any option of `adapter_config.json` this method's stack does not implement."""
        check_options(adapter, config, cls.config_class, cls.supported_options, cls.why_unsupported)

    @classmethod
    def read_factors(cls, adapter: str, config: dict, path: str, parts: dict[str, torch.Tensor]) -> Any:
        """One module's factors from its saved tensors (`parts`: `factor_key`'s `part` -> tensor)."""
        raise NotImplementedError

    @classmethod
    def check_fits(cls, adapter: str, path: str, module: nn.Module, model: nn.Module, factors: Any) -> None:
        """Raise an error naming the module and the shapes where `factors` do not fit `module`."""
        raise NotImplementedError

    # ------------------------------------------------------------------------------------------- stacked
    def hidden(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """All M adapters' hidden states at once, in the method's own layout (`combine` and `score` read it)."""
        raise NotImplementedError

    def combine(self, hidden: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
        """`sum_n weights_n * delta_n` ([..., out]) from `hidden(x, y)` and `weights` [..., M] (or [M])."""
        raise NotImplementedError

    @property
    def num_directions(self) -> int:
        raise NotImplementedError

    def key_directions(self) -> torch.Tensor:
        """[P, out] with `delta_n` a combination of these rows (the coefficients come from `hidden`)."""
        raise NotImplementedError

    def score(self, hidden: torch.Tensor, projected: torch.Tensor) -> torch.Tensor:
        """`query . delta_n` per adapter [..., M] from `projected = query @ key_directions().T` [..., P]."""
        raise NotImplementedError

    def select(
        self, x: torch.Tensor, y: torch.Tensor, slots: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        """Row i (x [n, T, in], y [n, T, out]) gets `sum_j weights[i, j] * delta_{slots[i, j]}` (weights None: one
        slot, weight 1): [n, T, out]."""
        raise NotImplementedError

    def select_grouped(self, x: torch.Tensor, y: torch.Tensor, groups: Any) -> torch.Tensor:
        """The chosen deltas of token rows (x [n, in], y [n, out]) for `groups` (`SlotGroups`): [assignments, out],
        in group order."""
        raise NotImplementedError

    def input_map(self) -> torch.Tensor:
        """With `linear_in_input`: [M*units, in], the hidden states as a linear map of x alone, with `delta_n =
        (hidden_n * w_n) flattened @ key_directions()` (AdapterFusion then folds the map into the base weight)."""
        raise NotImplementedError
