"""Muon for the hidden matrices, AdamW for the rest, as one optimizer (the modded-nanoGPT speedrun's split).

Muon (Jordan et al., 2024; `torch.optim.Muon`) orthogonalises each update of a 2-D weight; it is meant for hidden
layers only, so embeddings, the language-model head, norms and biases stay with AdamW. The loop, the learning-rate
schedulers, accelerate and hfzoo's checkpoints all expect one optimizer with one `state_dict` in torch's format:
`MuonWithAdamW` is that optimizer. Its groups are Muon's then AdamW's, its state holds both (keyed by parameter,
which the two never share), and each inner optimizer steps its own groups, so saving and loading it is torch's own.

Sharded with FSDP2 (`--sharding fsdp`), the weights, gradients and momentum are DTensors holding each process's rows;
torch's Muon computes on them with whole-matrix semantics (DTensor gathers what the Newton-Schulz iterations
multiply), so each update is the unsharded one, at the cost of gathering the operands of its Newton-Schulz products
every step.

torch's Muon runs its Newton-Schulz iterations in bfloat16, as the speedrun does on GPUs. On the CPU hfzoo's `Muon`
runs them in float32: a CPU without bfloat16 matrix units (this project's 2-core AMD EPYC, Zen 3) multiplies bfloat16
matrices some 50 times slower than float32 ones, and one Muon step of gpt-tiny took 1,057 ms there.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Any

import torch
from torch import nn

from ..integrations.torch import muon_iterations


def newton_schulz(
    update: torch.Tensor, coefficients: tuple[float, float, float], steps: int, eps: float, dtype: torch.dtype
) -> torch.Tensor:
    """torch's Muon orthogonalisation (`torch.optim._muon._zeropower_via_newtonschulz`: its quintic iteration, its
    normalisation, the same operations in the same order) in `dtype`, returned in `update`'s dtype. In bfloat16 it
    is torch's, bit for bit (tested)."""
    a, b, c = coefficients
    tall = update.size(0) > update.size(1)
    ortho = update.to(dtype).T if tall else update.to(dtype)
    ortho = ortho / ortho.norm().clamp(min=eps)
    for _ in range(steps):
        gram = ortho @ ortho.T
        ortho = torch.addmm(ortho, torch.addmm(gram, gram, gram, beta=b, alpha=c), ortho, beta=a)
    return (ortho.T if tall else ortho).to(update.dtype)


class Muon(torch.optim.Muon):
    """`torch.optim.Muon` (its state, groups and update), with the Newton-Schulz iterations in `cpu_dtype` where its
    parameters are on the CPU (see the module docstring); elsewhere in torch's bfloat16."""

    cpu_dtype: torch.dtype = torch.float32

    def step(self, closure=None):
        if self.param_groups[0]["params"][0].device.type != "cpu":
            return super().step(closure)
        with muon_iterations(partial(newton_schulz, dtype=self.cpu_dtype)):
            return super().step(closure)


class MuonWithAdamW(torch.optim.Optimizer):
    """`muon_groups` stepped by `Muon`, `adamw_groups` by `torch.optim.AdamW`, as one optimizer."""

    def __init__(self, muon_groups: list[dict], adamw_groups: list[dict], adamw_options: dict[str, Any]):
        self.muon = Muon(muon_groups)
        self.adamw = torch.optim.AdamW(adamw_groups, **adamw_options)
        # The inner optimizers' group dicts themselves: a scheduler setting a group's lr sets it for the inner one.
        super().__init__([*self.muon.param_groups, *self.adamw.param_groups], {})
        self._share_groups_and_state()

    def _share_groups_and_state(self) -> None:
        split = len(self.muon.param_groups)
        self.muon.param_groups, self.adamw.param_groups = self.param_groups[:split], self.param_groups[split:]
        self.muon.state = self.adamw.state = self.state

    @torch.no_grad()
    def step(self, closure=None):
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.muon.step()
        self.adamw.step()
        return loss

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """torch's loading, which replaces the group dicts and the state: the inner optimizers are pointed at the
        new ones."""
        super().load_state_dict(state_dict)
        self._share_groups_and_state()


def muon_parameters(model: nn.Module, parameters: Sequence[nn.Parameter]) -> set[nn.Parameter]:
    """Those of `parameters` Muon trains: 2-D weights that are neither an embedding table nor the output head."""
    kept_for_adamw = {id(module.weight) for module in model.modules() if isinstance(module, nn.Embedding)}
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    if head is not None:
        kept_for_adamw.add(id(head.weight))
    return {p for p in parameters if p.ndim == 2 and id(p) not in kept_for_adamw}
