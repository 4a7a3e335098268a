"""Adapter methods that compositions can stack, keyed by PEFT type (`adapter_config.json`'s `peft_type`).

Each method is one module here defining a `MethodStack` subclass (see `base.py` for what it declares); the order of
`METHOD_STACKS` is the order of a module's members when several methods adapt it. A new method becomes composable
by adding its module and one line below.
"""

from .base import MethodStack, linear_shape, output_width
from .bottleneck import BottleneckFactors, StackedBottleneck
from .ia3 import StackedIA3
from .lora import LoraFactors, StackedLoRA

METHOD_STACKS: dict[str, type[MethodStack]] = {
    stack.peft_type: stack for stack in (StackedLoRA, StackedBottleneck, StackedIA3)
}

__all__ = [
    "METHOD_STACKS", "BottleneckFactors", "LoraFactors", "MethodStack", "StackedBottleneck", "StackedIA3",
    "StackedLoRA", "linear_shape", "output_width",
]
