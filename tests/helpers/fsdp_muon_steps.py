"""Run under torchrun with two processes: one step of hfzoo's Muon + AdamW optimizer on gpt-tiny sharded with FSDP2
(hfzoo's own sharding, as `--sharding fsdp` does), then the same step unsharded on every process; rank 0 writes, for
each weight, the norm of the difference of the two updates relative to the unsharded update's norm, to the JSON file
named by the first argument.

Both see the same batch, so the sharded gradients are the unsharded ones. What is checked is that `torch.optim.Muon`
orthogonalises whole matrices on DTensor shards (DTensor redistributes what its Newton-Schulz iterations multiply), as
it does unsharded; orthogonalising each process's rows alone would change the updates entirely. torch runs those
iterations in bfloat16, where sums taken in another order (a sharded matmul's) differ in the third digit and five
iterations that amplify small singular values turn that into updates some 15% apart; the same iterations in float64
(torch's, with the dtype changed) leave only float rounding.
"""

import json
import sys

import torch
import torch.optim._muon as torch_muon
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.training.loop import build_optimizer
from hfzoo.training.sharding import shard_model


def newton_schulz_in_float64(grad: torch.Tensor, coefficients, steps: int, eps: float) -> torch.Tensor:
    """torch's `_zeropower_via_newtonschulz` (its quintic iteration, same coefficients and steps) in float64."""
    a, b, c = coefficients
    tall = grad.size(0) > grad.size(1)
    ortho = (grad.T if tall else grad).double()
    ortho = ortho / ortho.norm().clamp(min=eps)
    for _ in range(steps):
        gram = ortho @ ortho.T
        ortho = a * ortho + (b * gram + c * gram @ gram) @ ortho
    return (ortho.T if tall else ortho).to(grad.dtype)


def updated(sharded: bool, accelerator: Accelerator) -> dict[str, torch.Tensor]:
    """Each weight's change in one optimizer step."""
    torch.manual_seed(0)
    config = hfzoo.preset_config("gpt-tiny", vocab_size=64, hidden_dropout=0.0, attention_dropout=0.0)
    model = AutoModelForCausalLM.from_config(config)
    before = {name: p.detach().clone() for name, p in model.named_parameters()}
    if sharded:
        model = shard_model(model, accelerator, "fsdp")
    optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8, optimizer="muon")
    input_ids = torch.randint(0, 64, (4, 16), generator=torch.Generator().manual_seed(1))
    model(input_ids=input_ids, labels=input_ids).loss.backward()
    optimizer.step()
    whole = {name: p.full_tensor() if hasattr(p, "full_tensor") else p for name, p in model.named_parameters()}
    return {name: p.detach() - before[name] for name, p in whole.items()}


if __name__ == "__main__":
    accelerator = Accelerator(cpu=True)
    torch_muon._zeropower_via_newtonschulz = newton_schulz_in_float64
    sharded, unsharded = updated(True, accelerator), updated(False, accelerator)
    if accelerator.is_main_process:
        report = {name: ((sharded[name] - step).norm() / step.norm()).item() for name, step in unsharded.items()}
        with open(sys.argv[1], "w") as file:
            json.dump(report, file)
