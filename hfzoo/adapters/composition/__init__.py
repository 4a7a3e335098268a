"""The composition runtime: task adapters trained apart, served and trained together on one frozen base.

Task adapters are read from their PEFT folders (`task_adapter`), stacked per method so that all of them run in a
few batched operations (`stacking`, `stacked`), and combined per layer by a strategy (`strategies`, `routing`):
fixed routing, learned soft or hard routing, or AdapterFusion. `ComposedModel` (`model`) is what users save, load
and push.
"""

from .model import BASE, ComposedModel, compose, load_composition
from .stacking import METHOD_STACKS, MethodStack
from .strategies import STRATEGIES, Strategy
from .task_adapter import TaskAdapter, read_adapter

__all__ = [
    "BASE", "METHOD_STACKS", "STRATEGIES", "ComposedModel", "MethodStack", "Strategy", "TaskAdapter", "compose",
    "load_composition", "read_adapter",
]
