"""The model and optimizer state of a `sharding: fsdp` run in a checkpoint: safetensors shards, one per process.

Written with torch.distributed.checkpoint (DCP) through `HuggingFaceStorageWriter`: each process writes the shards
it holds (`state/shard-0000R-model-00001-of-00001.safetensors`), DCP's layout of each tensor (which slice of the whole
a shard is) in the safetensors header, nothing pickled. `HuggingFaceStorageReader` reads them back into whatever
sharding the resumed run has: the same number of processes (exact), or another one (DCP reshards; the weights and
moments are the same, but see `checkpointing.load_checkpoint` for why such a run is not bit-exact).

The tensors are keyed by name: `model.<i>.<parameter>` and `optimizer.<i>.<parameter>.<moment>` for the i-th prepared
model and optimizer (`get_state_dict` names an optimizer's state by parameter, not by index, so a resharded run finds
each moment). A weight tied to another (a language model's head and its embeddings) is saved once. The optimizer's
hyperparameters are JSON (`optimizer.json`), as in an unsharded checkpoint.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch import nn
from torch.distributed.checkpoint import HuggingFaceStorageReader, HuggingFaceStorageWriter
from torch.distributed.checkpoint.state_dict import get_state_dict, set_state_dict
from torch.distributed.tensor import DTensor
from torch.optim import Optimizer

from .sharding import tied_parameter_names

STATE_DIR = "state"


def _pairs(models: list[nn.Module], optimizers: list[Optimizer]) -> list[tuple[nn.Module, Optimizer]]:
    if len(models) != len(optimizers):
        raise RuntimeError(f"a sharded checkpoint pairs each model with its optimizer: {len(models)} models, "
                           f"{len(optimizers)} optimizers were prepared")  # fmt: skip
    return [(model, getattr(optimizer, "optimizer", optimizer)) for model, optimizer in zip(models, optimizers)]


def _flat_state(models: list[nn.Module], optimizers: list[Optimizer]):
    """(tensors by checkpoint key, each optimizer's state dict, each model's state dict): the tensors are the live
    state (sharded where the model is), so loading into them restores it."""
    tensors: dict[str, torch.Tensor] = {}
    described: list[dict[str, Any]] = []
    model_states, optimizer_states = [], []
    for i, (model, optimizer) in enumerate(_pairs(models, optimizers)):
        model_state, optimizer_state = get_state_dict(model, optimizer)
        tied = tied_parameter_names(model)
        tensors |= {f"model.{i}.{name}": value for name, value in model_state.items() if name not in tied}
        values = {}
        for parameter, moments in optimizer_state["state"].items():
            for name, value in moments.items():
                if isinstance(value, torch.Tensor):
                    tensors[f"optimizer.{i}.{parameter}.{name}"] = value
                else:
                    values[f"{parameter}.{name}"] = value
        described.append({"param_groups": optimizer_state["param_groups"], "values": values})
        model_states.append(model_state)
        optimizer_states.append(optimizer_state)
    return tensors, described, model_states, optimizer_states


def _distributed() -> bool:
    return dist.is_available() and dist.is_initialized()


@contextmanager
def _one_process_is_intended() -> Iterator[None]:
    """DCP warns that it assumes one process when there is no process group, even when told so (`no_dist`)."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="torch.distributed is disabled, unavailable or uninitialized")
        yield


def save_sharded_state(folder: Path, models: list[nn.Module], optimizers: list[Optimizer]) -> list[dict[str, Any]]:
    """Write this process's shards of `models` and `optimizers` under `folder/state`; every process must call it.
    Returns each optimizer's JSON part (hyperparameters, non-tensor values) for the main process to write."""
    tensors, described, _, _ = _flat_state(models, optimizers)
    distributed = _distributed()
    writer = HuggingFaceStorageWriter(str(folder / STATE_DIR), save_distributed=distributed)
    # A whole (unsharded) weight may be a transposed view; safetensors stores laid-out tensors (DTensor shards are).
    laid_out = {key: value.detach() if isinstance(value, DTensor) else value.detach().contiguous()
                for key, value in tensors.items()}  # fmt: skip
    with _one_process_is_intended():
        dcp.save(laid_out, storage_writer=writer, no_dist=not distributed)
    return described


def load_sharded_state(
    folder: Path, models: list[nn.Module], optimizers: list[Optimizer], described: list[dict[str, Any]]
) -> None:
    """Restore what `save_sharded_state` wrote (with its JSON part `described`) into `models` and `optimizers`, in
    this run's sharding, whatever the number of processes that saved it; every process must call it."""
    tensors, _, model_states, optimizer_states = _flat_state(models, optimizers)
    distributed = _distributed()
    with _one_process_is_intended():
        dcp.load(tensors, storage_reader=HuggingFaceStorageReader(str(folder / STATE_DIR)), no_dist=not distributed)
    for i, (model, optimizer) in enumerate(_pairs(models, optimizers)):
        model_state, optimizer_state, tied = model_states[i], optimizer_states[i], tied_parameter_names(model)
        for name in model_state:
            model_state[name] = tensors[f"model.{i}.{tied.get(name, name)}"]
        for parameter, moments in optimizer_state["state"].items():
            for name, value in moments.items():
                key = f"{parameter}.{name}"
                moments[name] = tensors[f"optimizer.{i}.{key}"] if isinstance(value, torch.Tensor) else (
                    described[i]["values"][key])  # fmt: skip
        optimizer_state["param_groups"] = described[i]["param_groups"]
        set_state_dict(model, optimizer, model_state_dict=model_state, optim_state_dict=optimizer_state)
