"""Config parts the recipes share: how any run executes, and how a run on a labelled task trains, keeps checkpoints
and uses ULMFiT's techniques.

Pretraining lists `RunOptions` as a base; fine-tuning and composition hold these parts as sections (`config.run`,
`config.training`, `config.checkpoints`, `config.ulmfit`: `hfzoo.core.recipe_config.section`). Key names are the same
either way, so YAML files and command lines name them directly (`--seed 3`; also `--run.seed 3` in a section).
"""

from __future__ import annotations

import dataclasses
import os
import re
from dataclasses import dataclass
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration

from ..core.recipe_config import MIXED_PRECISION, key
from ..tasks import TaskOptions
from .best_model import ranking_metric
from .compilation import CompilingAccelerator
from .sharding import SHARDING, check_launch

LR_SCHEDULES = ("cosine", "slanted_triangular", "inverse_sqrt")
OPTIMIZERS = ("adamw", "muon")


@dataclass
class RunOptions:
    """How a run executes, whatever it trains: devices, precision, gradient steps, logging and the seed."""

    gradient_accumulation_steps: int = key(1, "micro-batches per optimizer step", minimum=1)
    max_grad_norm: float | None = key(1.0, "gradient clipping norm; none = no clipping")
    mixed_precision: str | None = key(None, "none = as launched (accelerate config), else no",
                                      choices=MIXED_PRECISION)  # fmt: skip
    cpu: bool | None = key(None, "force CPU; none = CPU only when no accelerator is available")
    log_every: int = key(10, "optimizer steps between log records", minimum=1)
    seed: int = key(42, "seed of every random draw: initialisation, data order, dropout, masking")
    sharding: str = key("none", "fsdp = shard parameters, gradients and optimizer state over the processes "
                        "(torch's FSDP2, each transformer block a unit; launch with torchrun); none = replicate (DDP)",
                        choices=SHARDING)  # fmt: skip
    compile: bool = key(False, "torch.compile the model in place (same checkpoint keys); the first steps compile")
    overwrite_output_dir: bool = key(False, "write a new run into an output_dir that holds files (a finished run's: "
                                     "same names are replaced, others kept); without it such a folder is refused")

    def to_dict(self) -> dict[str, Any]:
        """Every key of the run's config (all its parts), as saved in its output folder and its log."""
        return dataclasses.asdict(self)

    def accelerator(self, seedable_data: bool = False) -> Accelerator:
        """The run's Accelerator: one process, DDP or FSDP, decided by how the script was launched; a launch that asks
        for FSDP and would not get it is refused (`sharding.check_launch`).

        `seedable_data`: samplers reshuffle each epoch from (seed, epoch), so a resumed run sees the same order.
        DeepSpeed is refused: it is no dependency of hfzoo, its checkpoints pickle, and no hfzoo run was ever tested
        with it; FSDP2 shards the same state with torch alone.
        """
        if os.environ.get("ACCELERATE_USE_DEEPSPEED", "false").lower() == "true":  # what `accelerate launch` sets
            raise ValueError("DeepSpeed is not supported (hfzoo neither installs nor tests it, and its checkpoints "
                             "pickle); shard with FSDP2 instead: torchrun --nproc_per_node N <recipe> --sharding fsdp")
        accelerator_class = CompilingAccelerator if self.compile else Accelerator
        accelerator = accelerator_class(
            cpu=self.cpu if self.cpu is not None else not torch.accelerator.is_available(),
            mixed_precision=self.mixed_precision,
            gradient_accumulation_steps=self.gradient_accumulation_steps,
            dataloader_config=DataLoaderConfiguration(use_seedable_sampler=True, data_seed=self.seed)
            if seedable_data
            else None,
        )
        check_launch(accelerator, self.sharding)
        return accelerator


@dataclass
class TaskTrainingOptions:
    """How a run on a labelled task trains and evaluates (fine-tuning and composition): batches, AdamW with linear
    warmup and cosine decay to zero, run length in epochs or steps."""

    per_device_batch_size: int = key(16, "examples (QA: windows) per micro-batch on each process", minimum=1)
    eval_batch_size: int | None = key(None, "examples per evaluation batch; none = per_device_batch_size", minimum=1)
    group_by_length: bool = key(True, "batches of examples of similar length (shuffled batch by batch, from the seed), "
                                "so that padding each batch to its longest example pads little; false = a plain "
                                "shuffle (hfzoo.training.length_grouping)")  # fmt: skip
    learning_rate: float | None = key(None, "peak learning rate; none = a default for what trains (fine-tuning: "
                                      "per method, full 5e-5 to prefix 1e-2; composition: 1e-3)")  # fmt: skip
    weight_decay: float = key(0.01, "AdamW weight decay (not applied to biases and norms)")
    optimizer: str = key("adamw", "adamw; or muon: Muon on the hidden matrices, AdamW on embeddings, heads, "
                         "norms and biases (the modded-nanoGPT speedrun; hfzoo.training.muon)",
                         choices=OPTIMIZERS)  # fmt: skip
    muon_learning_rate: float = key(0.02, "peak learning rate of Muon (optimizer muon)")
    warmup_ratio: float = key(0.06, "fraction of the steps spent in linear warmup (RoBERTa: 6%)")
    warmup_steps: int | None = key(None, "optimizer steps of linear warmup (the Transformer: 4000); overrides "
                                   "warmup_ratio", minimum=1)  # fmt: skip
    label_smoothing: float = key(0.0, "weight of the uniform distribution mixed into each target (the Transformer: "
                                 "0.1); 0 = the model's own loss")  # fmt: skip
    num_epochs: float = key(3.0, "passes over the training set (when max_steps is not given)")
    max_steps: int | None = key(None, "optimizer steps; overrides num_epochs", minimum=1)
    eval_every: int | None = key(None, "optimizer steps between evaluations; none = only at the end", minimum=1)
    tensorboard: bool = key(False, "also log to TensorBoard (skipped if tensorboard is not installed)")

    def check(self) -> None:
        if not 0.0 <= self.warmup_ratio < 1.0:
            raise ValueError(f"config key 'warmup_ratio' must be in [0, 1), got {self.warmup_ratio}.")
        if self.warmup_steps is not None and self.warmup_ratio != 0.06:
            raise ValueError("config keys 'warmup_steps' and 'warmup_ratio' both set the warmup: give one.")
        if not 0.0 <= self.label_smoothing < 1.0:
            raise ValueError(f"config key 'label_smoothing' must be in [0, 1), got {self.label_smoothing}.")
        if self.num_epochs <= 0:
            raise ValueError(f"config key 'num_epochs' must be > 0, got {self.num_epochs}.")
        if self.learning_rate is not None and self.learning_rate <= 0:
            raise ValueError(f"config key 'learning_rate' must be > 0, got {self.learning_rate}.")


@dataclass
class CheckpointOptions:
    """What a run on a labelled task keeps while it trains: checkpoints to resume from, the best model so far."""

    save_every: int | None = key(None, "optimizer steps between checkpoints (resume with --resume); none = none",
                                 minimum=1)  # fmt: skip
    keep_checkpoints: int = key(2, "how many of the latest checkpoints to keep", minimum=1)
    resume: bool | str = key(False, "true = continue from the latest checkpoint in output_dir; or a checkpoint path")
    save_best: bool = key(False, "keep the model of the best evaluation (every eval_every steps) in output_dir/best")
    best_metric: str | None = key(None, "the validation metric save_best ranks by; none = the task's main one")


@dataclass
class ULMFiTOptions:
    """ULMFiT's fine-tuning techniques (Howard & Ruder, 2018), on any model (`hfzoo.training.ulmfit`): learning rates
    per layer group, the slanted triangular schedule and gradual unfreezing; each can be used alone."""

    lr_schedule: str = key("cosine", "cosine: linear warmup (warmup_ratio) then cosine decay to zero; "
                           "slanted_triangular: ULMFiT's short linear increase then long linear decay; "
                           "inverse_sqrt: the Transformer's linear warmup then decay as 1/sqrt(step)",
                           choices=LR_SCHEDULES)  # fmt: skip
    stlr_cut_frac: float = key(0.1, "slanted_triangular: fraction of the steps spent increasing (ULMFiT: 0.1)")
    stlr_ratio: float = key(32.0, "slanted_triangular: how much smaller the first and last learning rates are than "
                            "the peak (ULMFiT: 32)")  # fmt: skip
    discriminative_lr_decay: float | None = key(None, "learning_rate for the top layer group (the head), divided by "
                                                "this for each group below: blocks from the top, then the "
                                                "embeddings (ULMFiT: 2.6); none = one learning rate")  # fmt: skip
    gradual_unfreezing: bool = key(False, "train the top layer group only, unfreezing one more group from the top "
                                   "every unfreeze_every steps")  # fmt: skip
    unfreeze_every: int | None = key(None, "gradual_unfreezing: optimizer steps between unfreezings; none = one "
                                     "epoch (ULMFiT)", minimum=1)  # fmt: skip

    def check(self) -> None:
        if not 0.0 < self.stlr_cut_frac < 1.0:
            raise ValueError(f"config key 'stlr_cut_frac' must be in (0, 1), got {self.stlr_cut_frac}.")
        if self.stlr_ratio < 1.0:
            raise ValueError(f"config key 'stlr_ratio' must be >= 1 (peak / smallest rate), got {self.stlr_ratio}.")
        if self.lr_schedule != "slanted_triangular" and (self.stlr_cut_frac != 0.1 or self.stlr_ratio != 32.0):
            raise ValueError("config keys 'stlr_cut_frac' and 'stlr_ratio' shape the slanted triangular schedule: "
                             "add --lr_schedule slanted_triangular or drop them.")  # fmt: skip
        if self.discriminative_lr_decay is not None and self.discriminative_lr_decay < 1.0:
            raise ValueError("config key 'discriminative_lr_decay' divides the learning rate for each layer group "
                             f"below the top one: it must be >= 1 (ULMFiT: 2.6), got {self.discriminative_lr_decay}.")
        if self.unfreeze_every is not None and not self.gradual_unfreezing:
            raise ValueError("config key 'unfreeze_every' paces gradual unfreezing: add --gradual_unfreezing true.")

    @property
    def uses_layer_groups(self) -> bool:
        return self.discriminative_lr_decay is not None or self.gradual_unfreezing


# Config keys of dropout, which only training reads: hfzoo's and BERT's `*dropout*`, GPT-2's `*_pdrop`, BART's
# `*_layerdrop`.
DROPOUT_KEY = re.compile(r"dropout|pdrop|layerdrop")


def check_adapter_overrides(data: TaskOptions) -> None:
    """An adapter is saved for its base as the base is, and reloads onto it so: `config_overrides` other than dropout
    would make the adapter compute one thing in the run and another once reloaded."""
    if changed := sorted(name for name in data.config_overrides if not DROPOUT_KEY.search(name)):
        raise ValueError(
            f"config key 'config_overrides': {', '.join(changed)} would change what the base computes, but an adapter "
            "reloads onto its base as saved, without them: override only dropout with an adapter, or use --method full."
        )


def check_task_run(data: TaskOptions, training: TaskTrainingOptions, checkpoints: CheckpointOptions,
                   do_train: bool) -> None:  # fmt: skip
    """The checks across the sections of a run on a labelled task (each section checks its own keys)."""
    if checkpoints.save_best and training.eval_every is None:
        raise ValueError(
            "config key 'save_best' needs eval_every: the best model is chosen among the evaluations made every "
            "eval_every steps (and at the end)."
        )
    if checkpoints.save_best:
        ranking_metric(data.task, checkpoints.best_metric)
    elif checkpoints.best_metric is not None:
        raise ValueError("config key 'best_metric' ranks the evaluations for save_best: add --save_best true.")
    if training.label_smoothing and data.task == "question-answering":
        raise ValueError("config key 'label_smoothing' smooths token or class labels; question answering predicts "
                         "span positions: drop it.")  # fmt: skip
    if not do_train and (checkpoints.resume or checkpoints.save_best or checkpoints.save_every is not None):
        raise ValueError(
            "config key 'do_train' is false: an evaluation-only run has nothing to checkpoint, resume or keep the "
            "best of; drop resume, save_every and save_best."
        )
