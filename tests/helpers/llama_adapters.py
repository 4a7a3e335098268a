"""The llama-tiny adapters the composition tests of tests/adapters compose (the `setup` fixture of
tests/adapters/conftest.py): their tasks, how they are trained, and their base."""

import torch
from transformers import AutoModelForCausalLM

TASKS = ("email", "asyncio", "logging")  # adapter name = the stdlib module its training text comes from


def train_steps(model, batch, labels, steps: int, lr: float) -> list[float]:
    """`steps` AdamW steps of `model` on one batch; the losses. The model is left in eval mode."""
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    losses = []
    for _ in range(steps):
        loss = model(**batch, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    model.eval()
    return losses


def causal_base(setup):
    """A fresh copy of the llama-tiny base the adapters were trained on."""
    return AutoModelForCausalLM.from_pretrained(setup.root / "base").eval()

