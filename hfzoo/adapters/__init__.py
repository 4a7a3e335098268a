"""Adapter methods for hfzoo and native transformers models, integrated with PEFT, and their composition.

"Method" means an adapter method as PEFT names it (LoRA, IA3, hfzoo's bottleneck); how composed adapters combine
is a "strategy" (`STRATEGIES`).
"""

from .bottleneck import BottleneckConfig, BottleneckLayer, BottleneckModel
from .composition import ComposedModel, compose, load_composition
from .stacking import METHOD_STACKS, MethodStack
from .strategies import STRATEGIES, Strategy
from .task_adapter import TaskAdapter, read_adapter

__all__ = [
    "METHOD_STACKS", "STRATEGIES", "BottleneckConfig", "BottleneckLayer", "BottleneckModel", "ComposedModel",
    "MethodStack", "Strategy", "TaskAdapter", "compose", "load_composition", "read_adapter",
]
