"""Adapter methods for hfzoo and native transformers models, integrated with PEFT, and their composition.

Two rooms: `bottleneck/` is a PEFT method (config, layer, model, registered with PEFT), used like LoRA;
`composition/` is the runtime that serves and trains several task adapters of any method on one base.

"Method" means an adapter method as PEFT names it (LoRA, IA3, hfzoo's bottleneck); how composed adapters combine
is a "strategy" (`STRATEGIES`).
"""

from .bottleneck import BottleneckConfig, BottleneckLayer, BottleneckModel
from .composition import (
    METHOD_STACKS, STRATEGIES, ComposedModel, MethodStack, Strategy, TaskAdapter, compose, load_composition,
    read_adapter,
)

__all__ = [
    "METHOD_STACKS", "STRATEGIES", "BottleneckConfig", "BottleneckLayer", "BottleneckModel", "ComposedModel",
    "MethodStack", "Strategy", "TaskAdapter", "compose", "load_composition", "read_adapter",
]
