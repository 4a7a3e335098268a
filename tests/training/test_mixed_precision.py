"""bf16 mixed precision (`--mixed_precision bf16`) through accelerate: matmuls under autocast in bf16, master weights,
gradients and optimizer state in fp32, and a loss curve that follows fp32's.

CPU bf16 is emulated and slow, so the curve is short (30 steps of gpt-tiny, batches of 2 blocks of 32 tokens) and
nothing is timed. The same code runs on GPUs (accelerate's autocast on `cuda`).
"""

from __future__ import annotations

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from tests.helpers.recipe_runs import run_pretrain as run_in_process
from tests.helpers.run_outputs import train_losses, weights

from hfzoo.training.logging import read_log
from hfzoo.training.options import RunOptions

SMALL = ["--max_steps", "30", "--save_every", "100", "--eval_every", "30", "--per_device_batch_size", "2",
         "--gradient_accumulation_steps", "1"]  # fmt: skip


@pytest.fixture
def bf16_accelerator() -> Accelerator:
    """The Accelerator a run with `--mixed_precision bf16` gets on CPU; accelerate's process-wide state is reset
    afterwards (a later Accelerator would otherwise inherit bf16)."""
    yield RunOptions(mixed_precision="bf16", cpu=True).accelerator()
    GradientState._reset_state()
    AcceleratorState._reset_state(reset_partial_state=True)


def test_bf16_runs_matmuls_in_bf16_and_keeps_fp32_master_weights(bf16_accelerator, tiny_model):
    accelerator = bf16_accelerator
    model = tiny_model("gpt-tiny")
    model, optimizer = accelerator.prepare(model, torch.optim.AdamW(model.parameters()))
    outputs = []
    linear = next(module for module in model.modules() if isinstance(module, torch.nn.Linear))
    linear.register_forward_hook(lambda module, args, output: outputs.append(output.dtype))
    ids = torch.randint(0, 100, (2, 16))
    loss = model(input_ids=ids, labels=ids).loss
    accelerator.backward(loss)
    optimizer.step()
    assert outputs == [torch.bfloat16]  # autocast
    assert loss.dtype == torch.float32
    assert {p.dtype for p in model.parameters()} == {p.grad.dtype for p in model.parameters()} == {torch.float32}
    assert {s["exp_avg"].dtype for s in optimizer.state.values()} == {torch.float32}


def test_bf16_loss_curve_follows_fp32(tmp_path):
    """Tolerance: bf16 keeps 8 bits of mantissa (~0.4% per product), but the losses are fp32 means over thousands of
    logits, so each step's loss moves by ~3e-4 here (8e-4 at most, measured); 0.05 at any step (1% of the loss) and
    0.01 on average leave room for the few steps where rounding changes an update, and still catch a wrong optimizer
    or unscaled loss (which move the curve by > 0.1 within ten steps)."""
    fp32_run = run_in_process("--output_dir", str(tmp_path / "fp32"), *SMALL)
    bf16_run = run_in_process("--output_dir", str(tmp_path / "bf16"), *SMALL, "--mixed_precision", "bf16")
    fp32, bf16 = train_losses(fp32_run), train_losses(bf16_run)
    assert (read_log(fp32_run)[0]["mixed_precision"], read_log(bf16_run)[0]["mixed_precision"]) == ("no", "bf16")
    assert list(bf16) == list(fp32) == list(range(1, 31))
    differences = [abs(bf16[step] - fp32[step]) for step in fp32]
    assert max(differences) < 0.05 and sum(differences) / len(differences) < 0.01, differences
    assert any(differences), "bf16 gave fp32's curve exactly: autocast did not run"
    assert fp32[30] < fp32[1] - 0.5 and bf16[30] < bf16[1] - 0.5  # both learn
    assert {tensor.dtype for tensor in weights(bf16_run).values()} == {torch.float32}  # saved master weights
