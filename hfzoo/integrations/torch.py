"""torch internals: dynamo settings scoped to one compiled module, a FLOP formula for the private grouped matmul
op, a module's hooks, a tensor's in-place version counter, Muon's Newton-Schulz iterations."""

import contextlib
import math
from collections.abc import Callable, Iterable, Iterator

import torch
import torch.optim._muon as torch_muon
from torch import nn
from torch.utils.flop_counter import flop_registry, register_flop_formula

from .versions import written_for


@written_for("torch")
def compile_with_dynamo_settings(model: nn.Module, **dynamo_settings) -> nn.Module:
    """`model.compile()`, with `dynamo_settings` (names of `torch._dynamo.config`) in force whenever dynamo traces
    the model's calls, and nowhere else.

    `nn.Module.compile` compiles lazily, at the first call (and recompiles at later ones), so a setting patched
    around `model.compile()` alone would be gone by then: the patch wraps the compiled call itself.
    """
    model.compile()
    model._compiled_call_impl = torch._dynamo.config.patch(**dynamo_settings)(model._compiled_call_impl)
    return model


@contextlib.contextmanager
@written_for("torch")
def recompile_limit(limit: int) -> Iterator[None]:
    """Within the block, dynamo compiles up to `limit` graphs per code object before falling back to eager."""
    with torch._dynamo.config.patch(recompile_limit=limit):
        yield


@contextlib.contextmanager
@written_for("torch")
def muon_iterations(orthogonalise: Callable[..., torch.Tensor]) -> Iterator[None]:
    """Within the block, `torch.optim.Muon` orthogonalises its updates with `orthogonalise` (called as torch's
    `_zeropower_via_newtonschulz`: update, coefficients, steps, eps). torch has no switch for the iterations' dtype:
    bfloat16 is written into that function."""
    torch_own = torch_muon._zeropower_via_newtonschulz
    torch_muon._zeropower_via_newtonschulz = orthogonalise
    try:
        yield
    finally:
        torch_muon._zeropower_via_newtonschulz = torch_own


@written_for("torch")
def register_grouped_mm_flops() -> None:
    """Count `grouped_mm`'s FLOPs in `FlopCounterMode` (torch 2.13 counts none for it): without this formula the
    adapters that token routing computes vanish from every FLOP count. Registered through torch's public
    `register_flop_formula`, for the private op `aten._grouped_mm` that `F.grouped_mm` runs; idempotent."""
    if torch.ops.aten._grouped_mm in flop_registry:
        return

    @register_flop_formula(torch.ops.aten._grouped_mm)
    def grouped_mm_flops(a_shape, b_shape, *args, out_shape=None, **kwargs) -> int:
        """2 x output elements x inner size; 2-D x 2-D splits the inner dimension across the groups."""
        if len(a_shape) == 2 and len(b_shape) == 2:
            return 2 * a_shape[0] * a_shape[1] * b_shape[1]
        return 2 * math.prod(out_shape) * a_shape[-1]


@written_for("torch")
def has_hooks(module: nn.Module) -> bool:
    """Whether forward hooks or pre-hooks are registered on `module` itself (accelerate offloading, PEFT)."""
    return bool(module._forward_hooks or module._forward_pre_hooks)


@written_for("torch")
def tensor_versions(tensors: Iterable[torch.Tensor]) -> tuple[tuple[int, int], ...]:
    """(storage address, in-place version counter) of each tensor: equal as long as none was replaced or changed
    in place, which makes it a cache key for products of weights."""
    return tuple((tensor.data_ptr(), tensor._version) for tensor in tensors)


@contextlib.contextmanager
@written_for("torch")
def classes_before_sharding(model: nn.Module) -> Iterator[None]:
    """`model` and its submodules with the classes they had before `fully_shard`, which gives each module it shards a
    class of its own (`FSDP<Class>`, subclassing `FSDPModule` and the module's class, defined in torch's FSDP code):
    `save_pretrained` copies the source file of a model's class and names it in config.json's `auto_map`, which must be
    hfzoo's model, not torch's FSDP module. Nothing may run the model inside the block."""
    from torch.distributed.fsdp import FSDPModule

    swapped = [(module, type(module)) for module in model.modules() if isinstance(module, FSDPModule)]
    for module, sharded_class in swapped:
        module.__class__ = next(base for base in sharded_class.__bases__ if base is not FSDPModule)
    try:
        yield
    finally:
        for module, sharded_class in swapped:
            module.__class__ = sharded_class
