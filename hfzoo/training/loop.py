"""The training loop every recipe runs, and its pieces: optimizer, schedule, throughput meter.

One loop for all recipes: micro-batches accumulate into optimizer steps (clipped, scheduled), and between steps
it logs, evaluates and checkpoints at the configured intervals, resuming mid-epoch from a `Progress`.

Collation happens in the loop, not in the DataLoader's workers or `collate_fn`: accelerate's loaders fetch
one batch ahead, so a collator drawing random masks inside the loader would have advanced its generator
past the batch being trained on when a checkpoint is taken, and a resumed run would mask differently.
The loaders therefore yield lists of examples (`collate_fn=list`) and the loop calls the collator.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from accelerate import Accelerator
from torch import nn
from torch.distributed.tensor import DTensor
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from transformers import get_cosine_with_min_lr_schedule_with_warmup

from ..data.streaming import StreamedBatches
from .checkpointing import Progress
from .logging import RunLogger


def build_optimizer(
    model: nn.Module,
    learning_rate: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    layers: Sequence[tuple[Sequence[nn.Parameter], float]] | None = None,
) -> torch.optim.AdamW:
    """AdamW with weight decay on matrices only: decaying biases and norm gains only hurts (GPT-2, nanoGPT).

    `layers`: (parameters, learning rate) pairs for learning rates per layer group (ULMFiT's discriminative
    fine-tuning, `hfzoo.training.ulmfit`), in the order of the optimizer's groups; none = all at `learning_rate`.
    Only parameters that require gradients are optimized."""
    groups = []
    for parameters, lr in layers if layers is not None else [(list(model.parameters()), learning_rate)]:
        trainable = [p for p in parameters if p.requires_grad]
        groups += [
            {"params": [p for p in trainable if p.ndim >= 2], "weight_decay": weight_decay, "lr": lr},
            {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0, "lr": lr},
        ]
    return torch.optim.AdamW([g for g in groups if g["params"]], lr=learning_rate, betas=betas, eps=eps)


def build_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int, max_steps: int, min_lr_ratio: float):
    """Linear warmup to the peak, then cosine decay to `min_lr_ratio` x peak at `max_steps`."""
    return get_cosine_with_min_lr_schedule_with_warmup(
        optimizer, num_warmup_steps=warmup_steps, num_training_steps=max_steps, min_lr_rate=min_lr_ratio
    )


def slanted_triangular(step: int, max_steps: int, cut_frac: float, ratio: float) -> float:
    """ULMFiT's slanted triangular learning rate (eq. 3), as a fraction of the peak: a short linear increase from
    1/ratio over the first `cut_frac` of the steps to 1 at step `cut`, then a long linear decay to 1/ratio at
    `max_steps`. The decay spans `max_steps - cut` steps, which is the paper's cut * (1/cut_frac - 1) when
    cut_frac * max_steps is a whole number and ends exactly at 1/ratio when it is not."""
    cut = max(1, math.floor(max_steps * cut_frac))
    fraction = step / cut if step < cut else 1 - (step - cut) / max(max_steps - cut, 1)
    return (1 + max(fraction, 0.0) * (ratio - 1)) / ratio


def build_slanted_triangular_scheduler(
    optimizer: torch.optim.Optimizer, max_steps: int, cut_frac: float, ratio: float
) -> LambdaLR:
    """The slanted triangular schedule on every group's own peak (discriminative learning rates keep their ratios)."""
    return LambdaLR(optimizer, partial(slanted_triangular, max_steps=max_steps, cut_frac=cut_frac, ratio=ratio))


def inverse_sqrt(step: int, warmup_steps: int) -> float:
    """The Transformer's learning rate (Vaswani et al., 2017, eq. 3), as a fraction of its peak: a linear increase
    over the first `warmup_steps` updates, then a decay proportional to the inverse square root of the update's
    number, min(n / warmup, sqrt(warmup / n)) for the n-th update (n = `step` + 1: LambdaLR passes the completed
    steps). The peak, 1, is the `warmup_steps`-th update; the paper's d_model^-0.5 * warmup^-0.5 is the peak
    learning rate this multiplies."""
    update = step + 1
    return min(update / warmup_steps, math.sqrt(warmup_steps / update))


def build_inverse_sqrt_scheduler(optimizer: torch.optim.Optimizer, warmup_steps: int) -> LambdaLR:
    """The inverse square root schedule on every group's own peak; it needs no run length (it never reaches 0)."""
    return LambdaLR(optimizer, partial(inverse_sqrt, warmup_steps=warmup_steps))


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


@dataclass
class Intervals:
    """When the loop does what, in optimizer steps. Logging and evaluation also happen at the last step;
    checkpoints never do (the run saves its final model instead)."""

    max_steps: int
    log_every: int
    eval_every: int | None  # none: evaluate at the end only
    save_every: int | None = None  # none: no checkpoints

    def due(self, every: int | None, step: int) -> bool:
        return step == self.max_steps or (every is not None and step % every == 0)

    def checkpoint_due(self, step: int) -> bool:
        return self.save_every is not None and step % self.save_every == 0 and step < self.max_steps


def _remaining_batches(
    train_loader: DataLoader | StreamedBatches, progress: Progress, accelerator: Accelerator
) -> Iterable[list]:
    """The batches of `progress.epoch` not trained on yet. A loader is reshuffled for the epoch and, after a resume,
    skips the micro-batches the checkpoint had trained on; a stream never ends and restores its own position from
    the checkpoint (`hfzoo.data.streaming`), so it goes on as it is (`progress` then counts its micro-batches)."""
    if isinstance(train_loader, StreamedBatches):
        return train_loader
    train_loader.set_epoch(progress.epoch)
    if progress.batches_in_epoch:
        return accelerator.skip_first_batches(train_loader, progress.batches_in_epoch)
    return train_loader


def train(
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: torch.optim.lr_scheduler.LRScheduler,
    train_loader: DataLoader | StreamedBatches,
    collate: Callable[[list], dict],
    accelerator: Accelerator,
    intervals: Intervals,
    log: RunLogger,
    progress: Progress,
    *,
    max_grad_norm: float | None,
    evaluate: Callable[[], dict[str, float]],
    checkpoint: Callable[[Progress], Path] | None = None,
    after_optimizer_step: Callable[[int], None] | None = None,
    on_trained: Callable[[], None] | None = None,
    loss_function: Callable[[nn.Module, dict[str, torch.Tensor]], torch.Tensor] | None = None,
) -> dict[str, float]:
    """Train until `intervals.max_steps`, continuing from `progress` (updated in place); returns the last metrics.

    `train_loader` (prepared by accelerate, or a stream) yields lists of examples, which `collate` turns into a batch.
    `evaluate` returns validation metrics (logged when not empty); `checkpoint` saves the run's state and returns
    where; `after_optimizer_step(step)` runs after each optimizer update, before gradients are zeroed (AdaLoRA
    reallocates its ranks from them); `on_trained()` runs once the last step is done, before the final evaluation,
    so that what it saves survives a failure there. `loss_function(model, batch)` replaces the model's own loss
    (`label_smoothed_loss`). Evaluation and checkpoints are left out of tokens/s.
    """
    meter, metrics = TrainMeter(accelerator), {}
    meter.load_state(progress.meter)
    model.train()
    while progress.step < intervals.max_steps:
        for features in _remaining_batches(train_loader, progress, accelerator):
            progress.batches_in_epoch += 1
            batch = to_device(collate(features), accelerator.device)
            with accelerator.accumulate(model):
                loss = model(**batch).loss if loss_function is None else loss_function(model, batch)
                accelerator.backward(loss)
                grad_norm = None
                if accelerator.sync_gradients and max_grad_norm is not None:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), max_grad_norm)
                optimizer.step()
                if accelerator.sync_gradients and after_optimizer_step is not None:
                    after_optimizer_step(progress.step + 1)
                optimizer.zero_grad()
            meter.add(loss, count_tokens(batch))
            if not accelerator.sync_gradients:
                continue
            if not accelerator.optimizer_step_was_skipped:  # fp16 overflow: the schedule waits too
                scheduler.step()
            progress.step += 1
            log.advance()
            if intervals.due(intervals.log_every, progress.step):
                mean_loss, tokens, tokens_per_s = meter.report()
                progress.tokens_seen += tokens
                if isinstance(grad_norm, DTensor):  # a sharded model's norm, over all shards (`sharding: fsdp`)
                    grad_norm = grad_norm.full_tensor()
                grad = None if grad_norm is None else float(grad_norm)
                lr = scheduler.get_last_lr()[0]
                log.train(progress.step, mean_loss, lr, grad, tokens_per_s, progress.tokens_seen)
            if on_trained is not None and progress.step == intervals.max_steps:
                with meter.paused():
                    on_trained()
            if intervals.due(intervals.eval_every, progress.step):
                with meter.paused():
                    metrics = evaluate()
                    if metrics:
                        log.write("eval", step=progress.step, **metrics)
            if checkpoint is not None and intervals.checkpoint_due(progress.step):
                with meter.paused():
                    progress.elapsed, progress.meter = log.elapsed, meter.state()
                    log.write("checkpoint", step=progress.step, path=str(checkpoint(progress)))
            if progress.step >= intervals.max_steps:
                break
        else:
            progress.epoch, progress.batches_in_epoch = progress.epoch + 1, 0
    return metrics
