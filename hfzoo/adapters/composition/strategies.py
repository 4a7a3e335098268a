"""Composition strategies, declared in one table: how the stacked adapters of each module are combined.

Each `Strategy` names its options with their defaults and checks, says whether it is learned (has parameters of
its own, trained for a new task) and whether examples pick their adapter by name, and builds the combiner of one
adapted module (`routing.py`). `compose()` and the compose recipe (its config and checks) read `STRATEGIES`.

Adapters need not share modules (a LoRA on qkv_proj beside a bottleneck on down_proj): an adapter is the identity
at a module it does not touch (its delta there is zero), and every strategy follows from that. "fixed" runs the
base module there for examples naming it; "average" adds the present adapters' weighted deltas only (two adapters
on disjoint modules, uniform weights: each applied at half strength where it sits); the learned strategies choose,
per module, among the adapters present and the base output, one candidate standing for all absent adapters (see
`Router`, `AdapterFusion`), so a module with a single adapter learns how much of it to apply. A composition of one
adapter weighs it against the base output the same way, at every module it adapts.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .routing import GRANULARITIES, AdapterFusion, FixedSelection, HardRouter, SoftRouter, WeightedAverage
from .stacked import StackedAdapters

MERGES = ("linear", "ties", "dare_linear", "dare_ties", "cat")
# Every strategy also takes this option: modules to train with the composition and save with it (a fresh head).
COMMON_OPTIONS: dict[str, Any] = {"trainable_modules": []}


def _weights(value: list | None, num_adapters: int) -> list[float]:
    weights = value or [1.0 / num_adapters] * num_adapters
    if len(weights) != num_adapters:
        raise ValueError(f"weights has {len(weights)} entries for {num_adapters} adapters")
    return [float(w) for w in weights]


def _merge(value: str | None, num_adapters: int) -> str | None:
    if value not in (None, *MERGES):
        raise ValueError(f"merge must be one of {MERGES} (or None: output averaging), got {value!r}")
    return value


def _granularity(value: str, num_adapters: int) -> str:
    if value not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {value!r}")
    return value


def _top_k(value: int, num_adapters: int) -> int:
    if not (isinstance(value, int) and 1 <= value <= num_adapters):
        raise ValueError(f"top_k must be an integer from 1 to the number of adapters ({num_adapters})")
    return value


def _temperature(value: float, num_adapters: int) -> float:
    if value <= 0:
        raise ValueError(f"temperature must be positive, got {value}")
    return value


def _keep(value: Any, num_adapters: int) -> Any:
    return value


# (resolved options, the module's stacked adapters, module input width, per-adapter weights) -> combiner
Combiner = Callable[[dict[str, Any], StackedAdapters, int, "list[float] | None"], nn.Module]


@dataclass(frozen=True)
class Strategy:
    """One composition strategy. `options`: option -> (default, check(value, num_adapters) -> value)."""

    name: str
    learned: bool  # has parameters of its own: routers or fusion, trained for a new task
    build: Combiner  # the combiner of one module (`weights`: per adapter, for "average")
    options: dict[str, tuple[Any, Callable[[Any, int], Any]]] = field(default_factory=dict)
    by_adapter_name: bool = False  # each example names its adapter (`adapter_names=[...]`)

    @property
    def defaults(self) -> dict[str, Any]:
        """Every option with its default, `COMMON_OPTIONS` included."""
        common = {option: copy.copy(default) for option, default in COMMON_OPTIONS.items()}
        return {**{option: default for option, (default, _) in self.options.items()}, **common}

    def resolve(self, num_adapters: int, options: dict[str, Any]) -> dict[str, Any]:
        """The options with defaults filled in and checked (they are saved in `composition.json`)."""
        allowed = self.defaults
        unknown = sorted(set(options) - set(allowed))
        if unknown:
            raise ValueError(f"strategy {self.name!r} takes the options {sorted(allowed)}, not {unknown}")
        resolved = {**allowed, **options}
        resolved["trainable_modules"] = list(resolved["trainable_modules"])
        for option, (_, check) in self.options.items():
            resolved[option] = check(resolved[option], num_adapters)
        return resolved


def _fixed(options: dict[str, Any], stack: StackedAdapters, in_features: int, weights: None) -> nn.Module:
    return FixedSelection()


def _average(options: dict[str, Any], stack: StackedAdapters, in_features: int, weights: list[float]) -> nn.Module:
    return WeightedAverage(torch.tensor([weights[index] for index in stack.members]))


def _soft(options: dict[str, Any], stack: StackedAdapters, in_features: int, weights: None) -> nn.Module:
    return SoftRouter(in_features, stack.size, options["granularity"], stack.base_is_candidate)


def _hard(options: dict[str, Any], stack: StackedAdapters, in_features: int, weights: None) -> nn.Module:
    return HardRouter(
        in_features, stack.size, options["granularity"], stack.base_is_candidate, options["top_k"],
        options["temperature"],
    )


def _fusion(options: dict[str, Any], stack: StackedAdapters, in_features: int, weights: None) -> nn.Module:
    return AdapterFusion(stack.width, options["temperature"], stack.base_is_candidate)


_GRANULARITY = ("token", _granularity)
_TEMPERATURE = (1.0, _temperature)
STRATEGIES: dict[str, Strategy] = {
    strategy.name: strategy
    for strategy in (
        Strategy("fixed", learned=False, build=_fixed, by_adapter_name=True),
        Strategy(
            "average", learned=False, build=_average,
            options={
                "weights": (None, _weights), "merge": (None, _merge), "density": (None, _keep), "seed": (0, _keep),
            },
        ),
        Strategy("soft", learned=True, build=_soft, options={"granularity": _GRANULARITY}),
        Strategy(
            "hard", learned=True, build=_hard,
            options={"granularity": _GRANULARITY, "top_k": (1, _top_k), "temperature": _TEMPERATURE},
        ),
        Strategy("fusion", learned=True, build=_fusion, options={"temperature": _TEMPERATURE}),
    )
}
