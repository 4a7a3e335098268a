"""The training losses a recipe can put in place of the model's own: label smoothing (Szegedy et al., 2016), keeping a
mixture of experts' load-balancing term.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from accelerate import Accelerator
from torch import nn
from transformers import AutoModelForCausalLM

from ..tasks import Task
from .evaluation import task_loss


def label_smoothed_loss(logits: torch.Tensor, labels: torch.Tensor, smoothing: float, shift: bool) -> torch.Tensor:
    """Cross-entropy against targets mixed with `smoothing` x the uniform distribution (Szegedy et al., 2016; the
    Transformer uses 0.1), as `torch.nn.CrossEntropyLoss(label_smoothing=)`: the mean over the positions whose
    label is not -100, which with `smoothing` 0 is the loss transformers' heads compute. `shift`: a causal
    language model's logits at position t predict the label at t + 1."""
    if shift:
        logits, labels = logits[..., :-1, :], labels[..., 1:]
    return nn.functional.cross_entropy(
        logits.reshape(-1, logits.shape[-1]).float(), labels.reshape(-1), ignore_index=-100, label_smoothing=smoothing
    )


def smoothed_loss_function(
    task: Task, accelerator: Accelerator, smoothing: float
) -> Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor] | None:
    """The training loss with `smoothing` label smoothing, for the loop's `loss_function` (none when 0: the model's
    own loss). A mixture of experts' load-balancing term is kept; causal LMs' labels are shifted, as their heads do."""
    if not smoothing:
        return None
    shift = task.auto_class(task.family) is AutoModelForCausalLM

    def loss(model: nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
        outputs = model(**batch)
        router_loss = outputs.loss - task_loss(accelerator.unwrap_model(model), outputs)
        return label_smoothed_loss(outputs.logits, batch["labels"], smoothing, shift) + router_loss

    return loss
