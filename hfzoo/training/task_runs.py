"""What the two recipes that train on a labelled task share (fine-tuning and composition): the config keys they both
have, preparing examples, tokenizer and model, the training run with its evaluations, and the files it leaves.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader
from transformers import AutoConfig, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from ..cards import RunRecord, Section, finetune_metadata, write_card
from ..models.checkpoint_files import check_checkpoint_folder
from ..recipe_config import CONFIG_FILE
from ..tasks import TASK_CLASSES, Task, TaskOptions, load_examples, model_family
from .checkpointing import Progress
from .evaluation import predict_all
from .logging import RunLogger, read_log
from .loop import Intervals, build_optimizer, build_scheduler, train
from .options import RunOptions, TaskTrainingOptions

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.jsonl"


@dataclass
class TaskRunOptions(RunOptions, TaskTrainingOptions, TaskOptions):
    """The keys of every run on a labelled task; a recipe adds its own (how the model adapts, `output_dir`)."""


def load_tokenizer(config: TaskOptions) -> PreTrainedTokenizerBase:
    """The model's tokenizer, with a pad token: batches need one, and so does a decoder's classifier, which finds
    each row's last real token by it. GPT-2-like tokenizers have none; their eos serves (no new embedding)."""
    source = config.tokenizer or config.model
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=config.trust_remote_code)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"the tokenizer of {config.model} has neither a pad nor an eos token to pad batches with")
        logger.info("the tokenizer has no pad token; padding with its eos token %r", tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def load_model(
    config: TaskOptions, task: Task, tokenizer: PreTrainedTokenizerBase, from_scratch: bool = False
) -> tuple[PreTrainedModel, str, list[str]]:
    """(model with the task's head, its family, the parameters the checkpoint did not provide). `from_scratch`: the
    checkpoint's architecture and tokenizer, none of its weights."""
    # A local folder by its absolute path, which the adapter records as its base: it then reloads from anywhere.
    source = str(Path(config.model).resolve()) if Path(config.model).exists() else config.model
    if Path(source).is_dir():
        # A missing, truncated or invalid file is named here, not by a bare SafetensorError or JSONDecodeError.
        check_checkpoint_folder(source, weights=not from_scratch)
    model_config = AutoConfig.from_pretrained(source, trust_remote_code=config.trust_remote_code)
    family = model_family(model_config)
    auto_class = task.auto_class(family)
    if type(model_config) not in auto_class._model_mapping:
        raise ValueError(
            f"{config.model} is a {model_config.model_type!r} model, for which neither transformers nor hfzoo has an "
            f"{auto_class.__name__} head; task {task.name!r} needs one"
        )
    if len(tokenizer) > getattr(model_config, "vocab_size", math.inf):
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, the model only {model_config.vocab_size}")
    for name, value in {**task.model_kwargs(family), "pad_token_id": tokenizer.pad_token_id}.items():
        setattr(model_config, name, value)
    if from_scratch:
        model = auto_class.from_config(model_config, trust_remote_code=config.trust_remote_code)
        return model, family, []
    # Safetensors only, for transformers' own models too: never unpickle a `pytorch_model.bin`.
    model, loading = auto_class.from_pretrained(
        source,
        config=model_config,
        trust_remote_code=config.trust_remote_code,
        output_loading_info=True,
        use_safetensors=True,
    )
    parameters = dict(model.named_parameters())
    return model, family, sorted(k for k in loading["missing_keys"] if k in parameters)


def prepare_run(
    config: TaskRunOptions, accelerator: Accelerator, from_scratch: bool = False
) -> tuple[Task, list, list, PreTrainedModel, list[str]]:
    """The start of a run: the output folder with the resolved config; the examples, read and checked (a malformed
    row fails here, naming its file and line), labels from train; the tokenizer; the pretrained body with the task's
    head, the task bound to them (`task.tokenizer`, `task.family`). Returns (task, training examples, validation
    examples, model, the parameters the checkpoint did not provide)."""
    task = TASK_CLASSES[config.task](config)
    set_seed(config.seed)  # the new head's initialisation: the same on every process
    if accelerator.is_main_process:
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        (Path(config.output_dir) / CONFIG_FILE).write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
    train_examples, eval_examples = load_examples(task, config)
    task.fit_labels(train_examples, eval_examples)
    tokenizer = load_tokenizer(config)
    model, family, missing = load_model(config, task, tokenizer, from_scratch)
    check_max_length(config, model.config)
    task.bind(tokenizer, family)
    return task, train_examples, eval_examples, model, missing


def check_max_length(config: TaskOptions, model_config) -> None:
    """Refuse a `max_length` beyond the positions the model has learned, before training: such inputs would train
    (with shorter rows) and then fail on the first long validation input, after all the steps. Rotary and relative
    positions have no table to run past; T5 has no `max_position_embeddings`."""
    limit = getattr(model_config, "max_position_embeddings", None)
    if hasattr(model_config, "position_embedding"):  # hfzoo's models say which
        learned = model_config.position_embedding == "learned"
    else:  # transformers' own: rotary ones have a rope setting
        learned = not any(hasattr(model_config, name) for name in ("rope_theta", "rope_parameters", "rope_scaling"))
    if limit is not None and learned and config.max_length > limit:
        raise ValueError(
            f"config key 'max_length' is {config.max_length}, but {config.model} has learned positions for at most "
            f"{limit} tokens (max_position_embeddings); use max_length <= {limit}."
        )


def log_trainable(what: str, parameters: dict[str, float]) -> None:
    logger.info(
        "%s: %s of %s parameters trainable (%.3f%%)", what, f"{parameters['trainable_parameters']:,}",
        f"{parameters['total_parameters']:,}", 100 * parameters["trainable_fraction"],
    )  # fmt: skip


@dataclass
class TrainedRun:
    """What `train_and_evaluate` leaves: the model as `accelerator.prepare` wrapped it, the final validation
    metrics and prediction records, and how far it trained."""

    model: nn.Module
    metrics: dict[str, float]
    records: list[dict]
    steps: int
    epochs: float


def train_and_evaluate(
    config: TaskRunOptions,
    task: Task,
    model: nn.Module,
    train_features: list[dict],
    eval_examples: list,
    eval_features: list[dict],
    accelerator: Accelerator,
    peak_learning_rate: float,
    save_trained: Callable[[nn.Module], None] | None = None,
    **start_fields: Any,
) -> TrainedRun:
    """Train `model`'s trainable parameters on `train_features`, evaluate every `eval_every` steps and at the end,
    and log to `log.jsonl` in `config.output_dir` (`start_fields`, e.g. the method and parameter counts, go into its
    start record). Whatever is frozen stays frozen: the optimizer only sees parameters that require gradients.
    `save_trained(model)` runs on every process once training is done, before the final evaluation: a failure in
    the evaluation (or anything after) still leaves the trained weights saved."""
    train_loader = DataLoader(
        train_features,
        batch_size=config.per_device_batch_size,
        shuffle=True,
        collate_fn=list,  # the loop collates (see hfzoo.training.loop)
        generator=torch.Generator().manual_seed(config.seed),
    )

    # --- AdamW on the trainable parameters, linear warmup then cosine decay to zero.
    optimizer = build_optimizer(model, peak_learning_rate, config.weight_decay, (0.9, 0.999), 1e-8)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    steps_per_epoch = math.ceil(len(train_loader) / config.gradient_accumulation_steps)
    max_steps = config.max_steps or math.ceil(config.num_epochs * steps_per_epoch)
    scheduler = build_scheduler(optimizer, round(config.warmup_ratio * max_steps), max_steps, 0.0)
    base_model = accelerator.unwrap_model(model).base_model
    set_seed(config.seed, device_specific=True)  # dropout: a different stream on each process

    log = RunLogger(
        config.output_dir, enabled=accelerator.is_main_process, max_steps=max_steps, tensorboard=config.tensorboard,
        description=task.name,
    )  # fmt: skip
    log.write(
        "start",
        step=0,
        task=task.name,
        **start_fields,
        num_processes=accelerator.num_processes,
        device=str(accelerator.device),
        train_features=len(train_features),
        eval_examples=len(eval_examples),
        max_steps=max_steps,
        config=config.to_dict(),
    )

    last: dict[str, Any] = {}

    def evaluate() -> dict[str, float]:
        batch_size = config.eval_batch_size or config.per_device_batch_size
        outputs = predict_all(task, model, eval_features, accelerator, batch_size)
        metrics, last["records"] = task.finish(eval_examples, eval_features, outputs)
        return metrics

    progress = Progress()
    metrics = train(
        model, optimizer, scheduler, train_loader, task.collate, accelerator,
        Intervals(max_steps, config.log_every, config.eval_every), log, progress,
        max_grad_norm=config.max_grad_norm, evaluate=evaluate,
        # AdaLoRA reallocates its rank budget from each step's gradients.
        after_optimizer_step=getattr(base_model, "update_and_allocate", None),
        on_trained=None if save_trained is None else lambda: save_trained(model),
    )  # fmt: skip
    log.write("end", step=progress.step, elapsed=round(log.elapsed, 3), **metrics)
    log.close()
    return TrainedRun(model, metrics, last["records"], progress.step, round(progress.step / steps_per_epoch, 2))


def run_summary(
    task: Task, base_model: str, method: str, parameters: dict, run: TrainedRun, train_examples: int, eval_examples: int
) -> dict[str, Any]:
    """The content of `metrics.json` (and what the card is made from): task, base model, method, final validation
    metrics, parameter counts, data sizes, steps, and the head's `from_pretrained` arguments for reloading."""
    return {
        "task": task.name,
        "pipeline_tag": task.pipeline_tag,
        "model": base_model,
        "family": task.family,
        "method": method,
        "auto_class": task.auto_class(task.family).__name__,
        **run.metrics,
        **parameters,
        "train_examples": train_examples,
        "eval_examples": eval_examples,
        "steps": run.steps,
        "epochs": run.epochs,
        "model_kwargs": task.model_kwargs(task.family) | {"pad_token_id": task.tokenizer.pad_token_id},
    }


def write_results(
    output_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    config: RunOptions,
    summary: dict[str, Any],
    predictions: list[dict],
    card_sections: Sequence[Section],
) -> None:
    """The tokenizer, `metrics.json`, `predictions.jsonl` (one record per validation example) and the model card
    (`card_sections` rendered from the config, the run's log and `summary`) into `output_dir`."""
    tokenizer.save_pretrained(output_dir)
    (output_dir / METRICS_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    with (output_dir / PREDICTIONS_FILE).open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in predictions)
    record = RunRecord(output_dir.name, config.to_dict(), read_log(output_dir), summary)
    write_card(output_dir, record, card_sections, finetune_metadata(record))
