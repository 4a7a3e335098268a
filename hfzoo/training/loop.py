"""The pieces of the training loop each recipe writes out: the optimizer, the learning-rate schedules and the run's
length, the training batches, and `TrainingSteps`, the loop's bookkeeping (micro-batches from where a `Progress`
stands, gradient clipping, the schedule's steps, the step count, tokens/s and the train log).

Each recipe's loop reads the same way: micro-batches accumulate into optimizer steps (clipped, scheduled), and
between steps the recipe evaluates and checkpoints at its intervals, resuming mid-epoch from a `Progress`.

Collation happens in the loop, not in the DataLoader's workers or `collate_fn`: accelerate's loaders fetch
one batch ahead, so a collator drawing random masks inside the loader would have advanced its generator
past the batch being trained on when a checkpoint is taken, and a resumed run would mask differently.
The loaders therefore yield lists of examples (`collate_fn=list`) and the loop calls the collator.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, contextmanager
from functools import partial

import torch
from accelerate import Accelerator
from torch import nn
from torch.distributed.tensor import DTensor
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from transformers import PreTrainedModel, get_cosine_with_min_lr_schedule_with_warmup, get_wsd_schedule

from ..data.streaming import StreamedBatches
from .checkpointing import Progress
from .length_grouping import train_sampling
from .logging import RunLogger
from .muon import Muon, MuonWithAdamW, muon_parameters
from .options import RunOptions, TaskTrainingOptions, ULMFiTOptions


def build_optimizer(
    model: nn.Module,
    learning_rate: float,
    weight_decay: float,
    betas: tuple[float, float],
    eps: float,
    layers: Sequence[tuple[Sequence[nn.Parameter], float]] | None = None,
    optimizer: str = "adamw",
    muon_learning_rate: float = 0.02,
    embedding_learning_rate: float | None = None,
) -> torch.optim.Optimizer:
    """AdamW with weight decay on matrices only: decaying biases and norm gains only hurts (GPT-2, nanoGPT). Its
    fused kernel where every parameter's device has one (`_fused_adamw_fits`), kept safe by a step hook that lays
    gradients and moments out like their parameters (`_lay_out_like_parameters`).

    `layers`: (parameters, learning rate) pairs for learning rates per layer group (ULMFiT's discriminative
    fine-tuning, `hfzoo.training.ulmfit`), in the order of the optimizer's groups; none = all at `learning_rate`.
    `optimizer="muon"`: the hidden matrices go to Muon at `muon_learning_rate` (scaled like `learning_rate` in each
    layer group), the rest to AdamW, as one `MuonWithAdamW` (Muon alone where nothing is left for AdamW).
    `embedding_learning_rate`: an AdamW group of its own for the token embedding tables (`input_embeddings`), at that
    peak (scaled alike); none = `learning_rate`. Only parameters that require gradients are optimized."""
    embeddings = input_embeddings(model) if embedding_learning_rate is not None else set()
    groups, muon_groups = [], []
    for parameters, lr in layers if layers is not None else [(list(model.parameters()), learning_rate)]:
        trainable = [p for p in parameters if p.requires_grad]
        if optimizer == "muon":
            hidden = muon_parameters(model, trainable)
            muon_groups.append({"params": [p for p in trainable if p in hidden], "weight_decay": weight_decay,
                                "lr": muon_learning_rate * lr / learning_rate})  # fmt: skip
            trainable = [p for p in trainable if p not in hidden]
        if embeddings:
            groups.append({"params": [p for p in trainable if id(p) in embeddings], "weight_decay": weight_decay,
                           "lr": embedding_learning_rate * lr / learning_rate})  # fmt: skip
            trainable = [p for p in trainable if id(p) not in embeddings]
        groups += [
            {"params": [p for p in trainable if p.ndim >= 2], "weight_decay": weight_decay, "lr": lr},
            {"params": [p for p in trainable if p.ndim < 2], "weight_decay": 0.0, "lr": lr},
        ]
    groups = [g for g in groups if g["params"]]
    muon_groups = [g for g in muon_groups if g["params"]]
    fused = _fused_adamw_fits(groups)
    adamw_options = dict(lr=learning_rate, betas=betas, eps=eps, fused=fused)
    if muon_groups and groups:
        built = MuonWithAdamW(muon_groups, groups, adamw_options)
    elif muon_groups:  # nothing for AdamW (LoRA matrices and a task head, say)
        return Muon(muon_groups)
    else:
        built = torch.optim.AdamW(groups, **adamw_options)
    if fused:
        built.register_step_pre_hook(_lay_out_like_parameters)
    return built


def input_embeddings(model: nn.Module) -> set[int]:
    """The ids of the token embedding tables of the transformers models in `model` (an objective's module may hold
    two, as ELECTRA's generator and discriminator, or share one). The modded-nanoGPT speedrun trains these faster
    than the rest: a row's gradient comes only from the positions its token fills, so it moves less per step. An
    output head tied to a table is that table, and takes its learning rate."""
    inputs = [module.get_input_embeddings() for module in model.modules() if isinstance(module, PreTrainedModel)]
    tables = {id(table.weight) for table in inputs if isinstance(table, nn.Embedding)}
    if not tables:
        raise ValueError(f"config key 'embedding_learning_rate' needs a token embedding table, and this "
                         f"{type(model).__name__} has none: drop the key.")  # fmt: skip
    return tables


def _fused_adamw_fits(groups: list[dict]) -> bool:
    """Whether AdamW's fused kernel takes all of `groups`' parameters. It updates every parameter in one kernel where
    the default runs a dozen operations per parameter on the CPU (gpt-speedrun-tiny, one AMD EPYC thread: 3.5 ms
    -> 1.2 ms per step, of ~72), and is the faster path on CUDA too; the results differ from the default's only in
    rounding."""
    return all(p.device.type in ("cpu", "cuda") and p.dtype.is_floating_point for g in groups for p in g["params"])


def _lay_out_like_parameters(optimizer: torch.optim.Optimizer, args: tuple, kwargs: dict) -> None:
    """Before a fused AdamW step: give each gradient and moment its parameter's memory layout where it has another.

    The fused kernel walks a parameter, its gradient and its moments as flat arrays, so all must share one layout or
    the update meets the wrong elements, silently. Two things give them different ones: `tune_for_cpu`'s
    `ModeFollowingLinear` lays a weight out anew when the model changes mode (a step taken in eval mode), and a
    checkpoint's moments load row-major beside a column-major weight. The copy happens only where layouts differ."""
    for group in optimizer.param_groups:
        for parameter in group["params"]:
            if parameter.grad is None:
                continue
            layout = parameter.stride()
            if parameter.grad.stride() != layout:
                parameter.grad = torch.empty_like(parameter).copy_(parameter.grad)
            state = optimizer.state.get(parameter, {})
            for name, value in state.items():
                if isinstance(value, torch.Tensor) and value.shape == parameter.shape and value.stride() != layout:
                    state[name] = torch.empty_like(parameter, dtype=value.dtype).copy_(value)


def build_scheduler(
    optimizer: torch.optim.Optimizer,
    warmup_steps: int,
    max_steps: int,
    min_lr_ratio: float,
    schedule: str = "cosine",
    decay_fraction: float = 0.2,
) -> LambdaLR:
    """Linear warmup to the peak, then to `min_lr_ratio` x peak at `max_steps`: `cosine` decays all the way, `wsd`
    (warmup-stable-decay, Hu et al., 2024; the modded-nanoGPT speedrun) holds the peak and decays linearly over the
    last `decay_fraction` of the steps, so a run can be extended from its stable phase. transformers' `wsd` warms
    up from `min_lr_ratio` x peak, not from 0."""
    if schedule == "wsd":
        decay_steps = max(1, round(decay_fraction * max_steps))
        return get_wsd_schedule(optimizer, min(warmup_steps, max_steps - decay_steps), decay_steps, max_steps,
                                decay_type="linear", min_lr_ratio=min_lr_ratio)  # fmt: skip
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


def build_task_scheduler(optimizer: torch.optim.Optimizer, ulmfit: ULMFiTOptions, max_steps: int,
                         warmup_steps: int) -> LambdaLR:  # fmt: skip
    """The learning-rate schedule `ulmfit.lr_schedule` names: linear warmup then cosine decay to zero, ULMFiT's
    slanted triangular one, or the Transformer's inverse square root."""
    if ulmfit.lr_schedule == "slanted_triangular":
        return build_slanted_triangular_scheduler(optimizer, max_steps, ulmfit.stlr_cut_frac, ulmfit.stlr_ratio)
    if ulmfit.lr_schedule == "inverse_sqrt":
        return build_inverse_sqrt_scheduler(optimizer, max(warmup_steps, 1))
    return build_scheduler(optimizer, warmup_steps, max_steps, 0.0)


def run_length(batches: int, training: TaskTrainingOptions, accumulation: int) -> tuple[int, int, int]:
    """(optimizer steps per epoch, steps of the run, warmup steps) for `batches` micro-batches per epoch:
    `max_steps`, else `num_epochs` passes; `warmup_steps`, else `warmup_ratio` of the steps."""
    steps_per_epoch = math.ceil(batches / accumulation)
    max_steps = training.max_steps or math.ceil(training.num_epochs * steps_per_epoch)
    return steps_per_epoch, max_steps, training.warmup_steps or round(training.warmup_ratio * max_steps)


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


def train_loader(features: list[dict], batch_size: int, seed: int, group_by_length: bool) -> DataLoader:
    """The training features in shuffled batches of `batch_size` (of similar lengths with `group_by_length`), as lists
    (the loop collates: see `TrainingSteps`); drawn from the seed alone, never from the global RNG."""
    return DataLoader(features, batch_size=batch_size, collate_fn=list,
                      **train_sampling(features, batch_size, seed, group_by_length))  # fmt: skip


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


class TrainingSteps:
    """The bookkeeping of a recipe's training loop; the loop itself (forward, backward, optimizer step, and what is
    due between steps) is written in the recipe.

    Iterating yields the micro-batches from where `progress` stands (updated in place: epoch, position in it) until
    `max_steps` optimizer steps are done, collated and on the device, with the model in training mode. Per
    micro-batch the recipe calls `backward(loss)` (gradients, clipped to `max_grad_norm` on a step's last
    micro-batch), its optimizer's `step()` and `zero_grad()` inside `accelerator.accumulate(model)`, then
    `stepped(loss, batch)`, which says whether an optimizer step ended there: the schedule has stepped, the step is
    counted and, every `log_every` steps and at the last, logged with its loss, learning rate, gradient norm and
    tokens/s. What the recipe does between steps (`due`, `checkpoint_due`) is left out of tokens/s in `paused()`.
    """

    def __init__(
        self, accelerator: Accelerator, model: nn.Module, scheduler: torch.optim.lr_scheduler.LRScheduler,
        loader: DataLoader | StreamedBatches, collate: Callable[[list], dict], progress: Progress, log: RunLogger,
        max_steps: int, run: RunOptions,
    ) -> None:  # fmt: skip
        self.accelerator, self.model, self.scheduler, self.loader, self.collate = (
            accelerator, model, scheduler, loader, collate
        )  # fmt: skip
        self.progress, self.log, self.max_steps = progress, log, max_steps
        self.log_every, self.max_grad_norm = run.log_every, run.max_grad_norm
        self.meter = TrainMeter(accelerator)
        self.meter.load_state(progress.meter)
        self.grad_norm: torch.Tensor | None = None

    def __iter__(self) -> Iterator[dict[str, torch.Tensor]]:
        progress = self.progress
        self.model.train()
        while progress.step < self.max_steps:
            for features in _remaining_batches(self.loader, progress, self.accelerator):
                progress.batches_in_epoch += 1
                yield to_device(self.collate(features), self.accelerator.device)
                if progress.step >= self.max_steps:
                    return
            progress.epoch, progress.batches_in_epoch = progress.epoch + 1, 0

    def backward(self, loss: torch.Tensor) -> None:
        """The gradients of `loss`; on the last micro-batch of an optimizer step, clipped to `max_grad_norm`."""
        self.accelerator.backward(loss)
        self.grad_norm = None
        if self.accelerator.sync_gradients and self.max_grad_norm is not None:
            self.grad_norm = self.accelerator.clip_grad_norm_(self.model.parameters(), self.max_grad_norm)

    def stepped(self, loss: torch.Tensor, batch: dict[str, torch.Tensor]) -> bool:
        """Count `batch`'s loss and tokens; when an optimizer step ended with it, step the schedule (unless fp16
        overflow skipped the update: the schedule waits too), count the step, log when due, and return True."""
        self.meter.add(loss, count_tokens(batch))
        if not self.accelerator.sync_gradients:
            return False
        if not self.accelerator.optimizer_step_was_skipped:
            self.scheduler.step()
        progress = self.progress
        progress.step += 1
        self.log.advance()
        if self.due(self.log_every):
            mean_loss, tokens, tokens_per_s = self.meter.report()
            progress.tokens_seen += tokens
            grad_norm = self.grad_norm
            if isinstance(grad_norm, DTensor):  # a sharded model's norm, over all shards (`sharding: fsdp`)
                grad_norm = grad_norm.full_tensor()
            grad = None if grad_norm is None else float(grad_norm)
            lr = self.scheduler.get_last_lr()[0]
            self.log.train(progress.step, mean_loss, lr, grad, tokens_per_s, progress.tokens_seen)
        return True

    @property
    def last(self) -> bool:
        """Whether the step just done is the run's last."""
        return self.progress.step == self.max_steps

    def due(self, every: int | None) -> bool:
        """Whether something done every `every` steps (and at the last; none: only at the last) is due now."""
        return self.last or (every is not None and self.progress.step % every == 0)

    def checkpoint_due(self, every: int | None) -> bool:
        """Whether a checkpoint every `every` steps (none: never) is due now; never at the last step, where the run
        saves its model instead (and its last checkpoint after that: `last_checkpoint_due`)."""
        return every is not None and self.progress.step % every == 0 and not self.last

    def last_checkpoint_due(self, every: int | None) -> bool:
        """Whether the run, done, checkpoints its last step: when it checkpoints at all (every `every` steps, fewer
        than its length), so that extending it with a larger max_steps resumes from its last step, not from its last
        periodic checkpoint. The recipe takes it after writing every output, never before: a resume from a checkpoint
        at the last step has nothing to do, so a run killed before its outputs were complete must find only older
        ones."""
        return every is not None and every < self.max_steps and self.last

    def paused(self) -> AbstractContextManager[None]:
        """Leave the block's wall time (evaluation, checkpointing, saving) out of tokens/s."""
        return self.meter.paused()

    def checkpoint_progress(self) -> Progress:
        """`progress` with the log's elapsed time, the meter's unreported sums and the run's length, for a checkpoint
        (every process calls it: the sums are reduced over the processes)."""
        self.progress.elapsed, self.progress.meter = self.log.elapsed, self.meter.state()
        self.progress.max_steps = self.max_steps
        return self.progress
