"""Adapter methods that compositions can stack, keyed by PEFT type (`adapter_config.json`'s `peft_type`).

Each method is one module here defining a `MethodStack` subclass (see `base.py` for what it declares). A new method
becomes composable by adding its module and its entry below. New entries go last: the order is the order of a
module's members when several methods adapt it, and saved routers' weights follow that order.
"""

from . import bottleneck, ia3, lora
from .base import MethodStack, linear_shape, output_width

METHOD_STACKS: dict[str, type[MethodStack]] = {
    stack.peft_type: stack for stack in (lora.StackedLoRA, bottleneck.StackedBottleneck, ia3.StackedIA3)
}

__all__ = ["METHOD_STACKS", "MethodStack", "linear_shape", "output_width"]
