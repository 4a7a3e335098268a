"""Adapter methods for hfzoo and native transformers models, integrated with PEFT."""

from .bottleneck import BottleneckConfig, BottleneckLayer, BottleneckModel
from .compose import ComposedModel, compose, load_composition

__all__ = ["BottleneckConfig", "BottleneckLayer", "BottleneckModel", "ComposedModel", "compose", "load_composition"]
