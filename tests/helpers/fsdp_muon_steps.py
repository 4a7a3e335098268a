"""Run under torchrun with two processes: one step of hfzoo's Muon + AdamW optimizer on gpt-tiny sharded with FSDP2
(hfzoo's own sharding, as `--sharding fsdp` does), then the same step unsharded on every process; rank 0 writes, for
each weight, the norm of the difference of the two updates relative to the unsharded update's norm, to the JSON file
named by the first argument.

Both see the same batch, so the sharded gradients are the unsharded ones. What is checked is that `torch.optim.Muon`
orthogonalises whole matrices on DTensor shards (DTensor redistributes what its Newton-Schulz iterations multiply), as
it does unsharded; orthogonalising each process's rows alone would change the updates entirely. The iterations run in
float64 here: in bfloat16 (torch's) or float32 (hfzoo's on the CPU), sums taken in another order (a sharded matmul's)
differ in the last digits, and five iterations that amplify small singular values make that visible (in bfloat16,
updates some 15% apart); in float64 only float rounding is left.
"""

import json
import sys

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.training.loop import build_optimizer
from hfzoo.training.muon import Muon
from hfzoo.training.sharding import shard_model


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
    Muon.cpu_dtype = torch.float64
    sharded, unsharded = updated(True, accelerator), updated(False, accelerator)
    if accelerator.is_main_process:
        report = {name: ((sharded[name] - step).norm() / step.norm()).item() for name, step in unsharded.items()}
        with open(sys.argv[1], "w") as file:
            json.dump(report, file)
