"""The learning rates an optimizer actually applies under a scheduler, step by step."""

import torch

from hfzoo.training.loop import build_optimizer

PEAK = 1e-3


def applied_learning_rates(build_scheduler, steps: int) -> list[float]:
    """The learning rate of each of `steps` optimizer steps of AdamW at PEAK under `build_scheduler(optimizer)`."""
    layer = torch.nn.Linear(4, 4)
    optimizer = build_optimizer(layer, PEAK, 0.0, (0.9, 0.999), 1e-8)
    scheduler = build_scheduler(optimizer)
    applied = []
    for _ in range(steps):
        applied.append(optimizer.param_groups[0]["lr"])  # what the coming optimizer step uses
        layer(torch.randn(2, 4)).sum().backward()
        optimizer.step()
        optimizer.zero_grad()
        scheduler.step()
    return applied

