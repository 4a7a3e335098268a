"""Adapter methods for hfzoo and native transformers models, integrated with PEFT."""

from .bottleneck import BottleneckConfig, BottleneckLayer, BottleneckModel

__all__ = ["BottleneckConfig", "BottleneckLayer", "BottleneckModel"]
