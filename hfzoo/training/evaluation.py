"""Evaluation on every process: the validation loss of a language model, and a task's predictions and metrics.

Each process evaluates its share of the examples (`EvalShard`); the main process ends with the complete result,
in example order, and every process runs the same number of forward passes, which FSDP needs.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import gather_object
from torch import nn

from ..tasks import Task
from .loop import to_device


def task_loss(model: nn.Module, outputs) -> torch.Tensor:
    """The objective's loss without a mixture-of-experts load-balancing term, which is not part of perplexity."""
    aux_loss = getattr(outputs, "aux_loss", None)
    if aux_loss is None:
        return outputs.loss
    return outputs.loss - model.config.router_aux_loss_coef * aux_loss


def _right_targets(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """[right predictions, targets] of one batch; `logits` cover every position or only the labelled ones (in the
    order of `labels[labels != -100]`, as the masked LMs' training outputs and ELECTRA's generator give them)."""
    labelled = labels != -100
    predicted = logits.argmax(-1)
    if predicted.shape == labels.shape:
        predicted = predicted[labelled]
    return torch.stack([(predicted == labels[labelled]).sum(), labelled.sum()]).double()


class EvalShard(torch.utils.data.Dataset):
    """This process's share of the validation examples, padded so every process has the same count.

    Examples are dealt out round-robin; the few padding entries (flagged `False`) repeat an example
    but carry no targets. Every process then runs the same number of forward passes (FSDP needs
    that) and no example is counted twice, so the loss equals a one-process
    evaluation. (accelerate's prepared loaders would repeat real examples instead.)
    """

    def __init__(self, examples, process_index: int, num_processes: int):
        self.examples = examples
        self.indices = list(range(process_index, len(examples), num_processes))
        self.length = -(-len(examples) // num_processes)

    def __len__(self) -> int:
        return self.length

    def __getitem__(self, i: int) -> tuple[dict, bool]:
        real = i < len(self.indices)
        return self.examples[self.indices[i] if real else 0], real


@torch.no_grad()
def evaluate(
    model: nn.Module,
    dataloader: Iterable[list[tuple[dict, bool]]],
    collator: Callable[[list], dict],
    accelerator: Accelerator,
    *,
    shifts_labels: bool,
    max_batches: int | None = None,
    perplexity_of: str = "loss",
    accuracy_of: tuple[str, str, str] | None = None,
    token_accuracy_of: str | None = None,
) -> dict[str, float]:
    """Validation loss (mean over target tokens, all processes), its parts, a perplexity and, with
    `accuracy_of=(name, logits field, label key)`, the accuracy of a sequence-level prediction (`eval_<name>`: e.g.
    next-sentence prediction, whose loss alone cannot say whether the pairs are told apart) and, with
    `token_accuracy_of` (a logits field), the share of target tokens whose most likely token is right
    (`eval_token_accuracy`: a masked LM's accuracy at its masked positions).

    `dataloader` yields lists of (example, real) from an `EvalShard`. Each batch's mean loss is
    weighted by its number of targets (labels != -100; a causal LM has no target at the first
    position), so batches with more masked tokens count more, as they should. The parts of a loss that the outputs
    report beside it (fields named `*_loss`, e.g. ELECTRA's `generator_loss` and `discriminator_loss`) are averaged
    alike as `eval_<field>`; the perplexity is the exponential of the mean `perplexity_of` (`loss`, or a part that
    is a language model's cross-entropy where `loss` adds other terms).
    """
    was_training = model.training
    model.eval()
    unwrapped = accelerator.unwrap_model(model)
    parts, sums = [], None  # sums: loss x targets, each part x targets, targets
    correct = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # right predictions, real examples
    right_tokens = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # right targets, targets
    for index, items in enumerate(dataloader):
        if max_batches is not None and index >= max_batches:
            break
        features, real = zip(*items)
        batch = to_device(collator(list(features)), accelerator.device)
        real = torch.tensor(real, device=accelerator.device)
        batch["labels"][~real] = -100  # padding entries: no targets
        outputs = model(**batch)
        if accuracy_of is not None:
            _, logits_field, label_key = accuracy_of
            right = outputs[logits_field].argmax(-1) == batch[label_key]
            correct += torch.stack([(right & real).sum(), real.sum()]).double()
        if token_accuracy_of is not None:
            right_tokens += _right_targets(outputs[token_accuracy_of], batch["labels"])
        if sums is None:
            parts = [name for name in outputs.keys() if name.endswith("_loss") and name != "aux_loss"]
            sums = torch.zeros(len(parts) + 2, dtype=torch.float64, device=accelerator.device)
        labels = batch["labels"][..., 1:] if shifts_labels else batch["labels"]
        targets = (labels != -100).sum()
        if targets > 0:  # a batch of padding entries only has a NaN loss (0 / 0)
            losses = torch.stack([task_loss(unwrapped, outputs), *(outputs[name] for name in parts)]).double()
            sums += torch.cat([losses * targets, targets.double()[None]])
    model.train(was_training)
    *loss_sums, targets = accelerator.reduce(sums, reduction="sum").tolist()
    loss, *part_losses = (loss_sum / max(targets, 1) for loss_sum in loss_sums)
    metrics = {"eval_loss": loss, **{f"eval_{name}": value for name, value in zip(parts, part_losses)}}
    perplexity = math.exp(min(metrics["eval_loss" if perplexity_of == "loss" else f"eval_{perplexity_of}"], 700.0))
    if accuracy_of is not None:
        right, examples = accelerator.reduce(correct, reduction="sum").tolist()
        metrics[f"eval_{accuracy_of[0]}"] = right / max(examples, 1)
    if token_accuracy_of is not None:
        right, targets_scored = accelerator.reduce(right_tokens, reduction="sum").tolist()
        metrics["eval_token_accuracy"] = right / max(targets_scored, 1)
    return {**metrics, "perplexity": perplexity, "eval_targets": int(targets)}


def parameter_checksum(model: nn.Module) -> str:
    """SHA-256 of every parameter's bytes: equal on all processes iff their weights are identical."""
    digest = hashlib.sha256()
    for name, param in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()


@torch.no_grad()
def predict_all(task: Task, model: nn.Module, features: list[dict], accelerator: Accelerator, batch_size: int) -> list:
    """`task.predict_batch` over all `features`, each process on its share; the outputs in feature order.

    Every process runs the same number of batches (an `EvalShard` repeats one feature to even them out, flagged
    not real), which FSDP needs; the main process's list is complete after the gather.
    """
    was_training = model.training
    model.eval()
    shard = EvalShard(list(range(len(features))), accelerator.process_index, accelerator.num_processes)
    mine = []
    for start in range(0, len(shard), batch_size):
        items = [shard[i] for i in range(start, min(start + batch_size, len(shard)))]
        batch = to_device(task.collate([features[index] for index, _ in items]), accelerator.device)
        outputs = task.predict_batch(model, batch)
        mine.extend((index, output) for (index, real), output in zip(items, outputs) if real)
    model.train(was_training)
    gathered = gather_object(mine) if accelerator.num_processes > 1 else mine
    return [output for _, output in sorted(gathered, key=lambda pair: pair[0])]


@dataclass
class TrainedRun:
    """What a recipe's training run (or `evaluate_only`) leaves: the model as `accelerator.prepare` wrapped it, the
    final validation metrics and prediction records, how far it trained, and the best evaluation (`save_best`)."""

    model: nn.Module
    metrics: dict[str, float]
    records: list[dict]
    steps: int
    epochs: float
    best: dict[str, Any] | None = None


def evaluate_task(task: Task, model: nn.Module, eval_examples: list, eval_features: list[dict],
                  accelerator: Accelerator, batch_size: int) -> tuple[dict[str, float], list[dict]]:  # fmt: skip
    """(validation metrics, one prediction record per validation example)."""
    return task.finish(eval_examples, eval_features, predict_all(task, model, eval_features, accelerator, batch_size))
