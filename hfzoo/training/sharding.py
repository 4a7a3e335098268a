"""Fully sharded data parallel training (FSDP2) for every recipe: `sharding: fsdp`.

With `sharding: fsdp`, each transformer block of the model is wrapped with torch's `fully_shard`, then the model
itself (embeddings, heads, routers): parameters, gradients and AdamW's moments live on each process as DTensor
shards, gathered block by block for the forward and backward passes. The blocks are the classes transformers'
`_no_split_modules` names, so this works for hfzoo's three families, transformers' own models and the PEFT or
composed models built on them.

Why `fully_shard` directly and not accelerate's FSDP plugin: accelerate takes its FSDP path on GPUs only; on CPU,
`accelerate launch` with an FSDP config (even `Accelerator(fsdp_plugin=...)`) silently runs DDP (MULTI_CPU). Sharding
here runs the same code on gloo (CPU) and nccl (GPUs); accelerate still does what it does well: the process group,
the device, splitting the data over processes, gradient accumulation. Such an accelerate launch is refused
(`check_launch`) rather than left to train unsharded.

One process has nothing to shard: the model stays whole, but its checkpoints are written sharded all the same
(`hfzoo.training.sharded_state`), so a run can resume on another number of processes.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

import torch
from accelerate import Accelerator
from accelerate.utils import DistributedType
from torch import nn
from torch.distributed.checkpoint.state_dict import StateDictOptions, get_model_state_dict
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.utils.data import DataLoader

from ..core.cpu_layout import tune_for_cpu
from ..integrations.accelerate import track_prepared_model
from ..integrations.torch import classes_before_sharding
from ..integrations.transformers import block_class_names

logger = logging.getLogger(__name__)

SHARDING = ("none", "fsdp")
TORCHRUN_HINT = "torchrun --nproc_per_node 2 recipes/<recipe>.py ... --sharding fsdp"


class ShardingError(ValueError):
    """A launch that asks for sharding and would get something else."""


def check_launch(accelerator: Accelerator, sharding: str) -> None:
    """Refuse a launch that asks for FSDP and would silently train otherwise: accelerate's FSDP config on a machine
    where accelerate runs DDP instead (CPU), or `sharding: fsdp` under accelerate's own FSDP or DeepSpeed (the model
    would be sharded twice). Call it right after creating the Accelerator, before any work."""
    launched = accelerator.distributed_type
    if os.environ.get("ACCELERATE_USE_FSDP", "false").lower() == "true" and launched is not DistributedType.FSDP:
        raise ShardingError(
            f"accelerate launch asked for FSDP, but accelerate runs {launched.value} (unsharded) on "
            f"{accelerator.device.type}: its FSDP plugin shards on GPUs only; run `{TORCHRUN_HINT}` instead"
        )
    if sharding == "fsdp" and launched in (DistributedType.FSDP, DistributedType.DEEPSPEED):
        raise ShardingError(
            f"config key 'sharding': fsdp shards the model with torch's fully_shard, and this launch is accelerate's "
            f"{launched.value}, which would shard it again; launch with `{TORCHRUN_HINT}`"
        )


def shard_model(model: nn.Module, accelerator: Accelerator, sharding: str) -> nn.Module:
    """`model` on the run's device, each of its transformer blocks and then the model itself `fully_shard`ed over all
    processes when `sharding` is fsdp and there are several; else `model` unchanged. Call it after the model is built
    (the same initial weights on every process) and before its optimizer: the optimizer must hold the shards."""
    if sharding != "fsdp" or accelerator.num_processes == 1:
        return model
    blocks = block_class_names(model)
    if not blocks:
        logger.warning("%s names no transformer blocks (_no_split_modules): sharding it as one unit, so each process "
                       "gathers all its weights at once", type(model).__name__)  # fmt: skip
    model.to(accelerator.device)
    for parameter in model.parameters():  # fully_shard splits rows: a transposed view must be laid out first
        if not parameter.is_contiguous():
            parameter.data = parameter.data.contiguous()
    mesh = init_device_mesh(accelerator.device.type, (accelerator.num_processes,))
    units = [module for module in model.modules() if type(module).__name__ in blocks]
    for unit in units:
        fully_shard(unit, mesh=mesh)
    fully_shard(model, mesh=mesh)
    logger.info("sharded %s over %d processes: %d blocks (%s) and the rest", type(model).__name__,
                accelerator.num_processes, len(units), ", ".join(sorted(blocks)) or "none")  # fmt: skip
    return model


def ready_for_training(model: nn.Module, accelerator: Accelerator, sharding: str) -> nn.Module:
    """`model` as the run trains it; call it before its optimizer exists. Sharded (`shard_model`), or, unsharded on a
    CPU, with hfzoo's CPU layouts (`hfzoo.core.cpu_layout`: the run's choice, not the saved model code's), so that the
    optimizer's state is created in the training layout."""
    model = shard_model(model, accelerator, sharding)
    if not is_sharded(model) and accelerator.device.type == "cpu":
        tune_for_cpu(model)
    return model


def tied_parameter_names(model: nn.Module) -> dict[str, str]:
    """Parameter name -> the name it is tied to (the same Parameter reached by two paths, e.g. a language model's head
    and its token embeddings), for every name but the first."""
    first: dict[int, str] = {}
    tied = {}
    for name, parameter in model.named_parameters(remove_duplicate=False):
        if id(parameter) in first:
            tied[name] = first[id(parameter)]
        else:
            first[id(parameter)] = name
    return tied


def is_sharded(model: nn.Module) -> bool:
    return isinstance(model, FSDPModule)


def prepare(accelerator: Accelerator, model: nn.Module, optimizer: torch.optim.Optimizer, *loaders: DataLoader):
    """`accelerator.prepare(model, optimizer, *loaders)`, except that:
    - a sharded model is not wrapped again (DDP would refuse its DTensors): it is only counted among the prepared
      models, which checkpoints save;
    - the loaders yield their batches as they are, lists of examples that the loop collates and moves to the device
      (`TrainingSteps`): accelerate would walk every token id of a list batch to move it, for nothing (about 0.9 ms of
      a 71 ms step for 12 blocks of 64 ids, measured side by side)."""
    if is_sharded(model):
        track_prepared_model(accelerator, model)
        optimizer = accelerator.prepare(optimizer)
    else:
        model, optimizer = accelerator.prepare(model, optimizer)
    return model, optimizer, *(accelerator.prepare_data_loader(loader, device_placement=False) for loader in loaders)


@contextmanager
def whole_for_saving(model: nn.Module) -> Iterator[dict[str, torch.Tensor] | None]:
    """Inside the block, `model` can be saved whole with `save_pretrained(state_dict=<what it yields>)`: a sharded
    model's weights gathered on the main process (the others get an empty dict), with the classes of its modules as
    before sharding (config.json must name hfzoo's class); None for a model that is not sharded (its own
    `state_dict` is whole). Every process must enter it."""
    if not is_sharded(model):
        yield None
        return
    state = get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))
    if state:  # gathered apart, tied weights are two tensors: one again, as in a model's own state dict, saved once
        state |= {name: state[owner] for name, owner in tied_parameter_names(model).items()}
    with classes_before_sharding(model):
        yield state


def whole_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model.state_dict()`, with a sharded model's weights gathered whole on every process (all must call it): what
    a check comparing every weight reads."""
    if not is_sharded(model):
        return model.state_dict()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True))
