"""Pieces of the training loop that every recipe shares: optimizer, schedule, meters, evaluation.

Collation happens in the loop, not in the DataLoader's workers or `collate_fn`: accelerate's loaders fetch
one batch ahead, so a collator drawing random masks inside the loader would have advanced its generator
past the batch being trained on when a checkpoint is taken, and a resumed run would mask differently.
The loaders therefore yield lists of examples (`collate_fn=list`) and the loop calls the collator.
"""

from __future__ import annotations

import hashlib
import math
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import torch
from accelerate import Accelerator
from torch import nn
from transformers import get_cosine_with_min_lr_schedule_with_warmup


def build_optimizer(
    model: nn.Module, learning_rate: float, weight_decay: float, betas: tuple[float, float], eps: float
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: decaying biases and norm gains only hurts (GPT-2, nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    return torch.optim.AdamW(groups, lr=learning_rate, betas=betas, eps=eps)


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int, min_lr_ratio: float):
    """Linear warmup to the peak, then cosine decay to `min_lr_ratio` x peak at `max_steps`."""
    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=warmup_steps, num_training_steps=max_steps, min_lr_rate=min_lr_ratio
    )


def to_device(batch: dict, device: torch.device) -> dict[str, torch.Tensor]:
    return {key: value.to(device) for key, value in batch.items()}


def count_tokens(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Input tokens of a batch (padding excluded), as a tensor so counting never syncs the device."""
    mask = batch.get("attention_mask")
    return (
        mask.sum() if mask is not None else torch.tensor(batch["input_ids"].numel(), device=batch["input_ids"].device)
    )


class TrainMeter:
    """Loss and throughput since the last report, summed over processes only when reported.

    Values accumulate on the device, so a step does not wait for the device or the other processes;
    `report` (every `log_every` steps) does one all-reduce. Time spent in evaluation and checkpointing
    is excluded from tokens/s via `pause`.
    """

    def __init__(self, accelerator: Accelerator):
        self.accelerator = accelerator
        self._sums = torch.zeros(3, dtype=torch.float64, device=accelerator.device)  # loss, micro-batches, tokens
        self._start = time.perf_counter()

    def add(self, loss: torch.Tensor, tokens: torch.Tensor) -> None:
        self._sums += torch.stack([loss.detach().double(), torch.ones_like(loss, dtype=torch.float64), tokens.double()])

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Leave the wall time of the block (evaluation, checkpointing) out of tokens/s."""
        start = time.perf_counter()
        yield
        self._start += time.perf_counter() - start

    def state(self) -> list[float]:
        """The sums not yet reported, over all processes (for a checkpoint); all processes must call it.

        The main process keeps the global sums and the others zero, so the next report is unchanged.
        """
        sums = self.accelerator.reduce(self._sums, reduction="sum")
        self._sums.copy_(sums if self.accelerator.is_main_process else torch.zeros_like(sums))
        return sums.tolist()

    def load_state(self, sums: list[float]) -> None:
        if self.accelerator.is_main_process:
            self._sums.copy_(torch.tensor(sums, dtype=torch.float64))

    def report(self) -> tuple[float, int, float]:
        """(mean loss, tokens, tokens/s) over all processes since the last report; resets the meter."""
        loss_sum, micro_batches, tokens = self.accelerator.reduce(self._sums, reduction="sum").tolist()
        seconds = max(time.perf_counter() - self._start, 1e-9)
        self._sums.zero_()
        self._start = time.perf_counter()
        return loss_sum / max(micro_batches, 1), int(tokens), tokens / seconds


def task_loss(model: nn.Module, outputs) -> torch.Tensor:
    """The objective's loss without a mixture-of-experts load-balancing term, which is not part of perplexity."""
    aux_loss = getattr(outputs, "aux_loss", None)
    if aux_loss is None:
        return outputs.loss
    return outputs.loss - model.config.router_aux_loss_coef * aux_loss


class EvalShard(torch.utils.data.Dataset):
    """This process's share of the validation examples, padded so every process has the same count.

    Examples are dealt out round-robin; the few padding entries (flagged `False`) repeat an example
    but carry no targets. Every process then runs the same number of forward passes (FSDP and
    DeepSpeed need that) and no example is counted twice, so the loss equals a one-process
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
) -> dict[str, float]:
    """Validation loss (mean over target tokens, all processes) and its perplexity.

    `dataloader` yields lists of (example, real) from an `EvalShard`. Each batch's mean loss is
    weighted by its number of targets (labels != -100; a causal LM has no target at the first
    position), so batches with more masked tokens count more, as they should.
    """
    was_training = model.training
    model.eval()
    unwrapped = accelerator.unwrap_model(model)
    sums = torch.zeros(2, dtype=torch.float64, device=accelerator.device)  # loss x targets, targets
    for index, items in enumerate(dataloader):
        if max_batches is not None and index >= max_batches:
            break
        features, real = zip(*items)
        batch = to_device(collator(list(features)), accelerator.device)
        batch["labels"][~torch.tensor(real, device=accelerator.device)] = -100  # padding entries: no targets
        outputs = model(**batch)
        labels = batch["labels"][..., 1:] if shifts_labels else batch["labels"]
        targets = (labels != -100).sum()
        if targets > 0:  # a batch of padding entries only has a NaN loss (0 / 0)
            sums += torch.stack([task_loss(unwrapped, outputs).double() * targets, targets.double()])
    model.train(was_training)
    loss_sum, targets = accelerator.reduce(sums, reduction="sum").tolist()
    loss = loss_sum / max(targets, 1)
    return {"eval_loss": loss, "perplexity": math.exp(min(loss, 700.0)), "eval_targets": int(targets)}


def parameter_checksum(model: nn.Module) -> str:
    """SHA-256 of every parameter's bytes: equal on all processes iff their weights are identical."""
    digest = hashlib.sha256()
    for name, param in sorted(model.state_dict().items()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes())
    return digest.hexdigest()
