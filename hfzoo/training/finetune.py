"""Fine-tune a pretrained model on a labelled task: config -> examples -> tokenizer -> model (+ adapter) ->
features -> AdamW -> loop -> validation metrics -> metrics.json, predictions, model or adapter, card.

Read `finetune` top to bottom; it is the recipe, and `train_and_evaluate` its loop (which the composition recipe,
hfzoo.training.compose, runs too). The task (hfzoo.finetuning: sequence-classification,
token-classification, question-answering, seq2seq) decides how examples become token ids for the model's family
and how outputs become predictions and metrics; everything else is here. It runs as one process or under
`accelerate launch` / `torchrun`:

    python recipes/finetune.py --config recipes/configs/finetune/sst2.yaml
    hfzoo finetune --model runs/bert-small-mlm --task sequence-classification --dataset ../shared/data/sst2 \\
        --text_column sentence --method lora --max_steps 200
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Sequence
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

from ..cards import write_finetune_card
from ..finetuning import TASK_CLASSES, Task, apply_method, count_parameters, head_modules, load_examples, model_family
from ..finetuning.config import FinetuneConfig, learning_rate, parse_args
from ..finetuning.methods import peft_config_for
from ..finetuning.task import predict_all
from .config import CONFIG_FILE
from .logging import RunLogger
from .loop import TrainMeter, build_optimizer, build_scheduler, count_tokens

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.jsonl"


def load_tokenizer(config: FinetuneConfig) -> PreTrainedTokenizerBase:
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
    config: FinetuneConfig, task: Task, tokenizer: PreTrainedTokenizerBase
) -> tuple[PreTrainedModel, str, list[str]]:
    """(model with the task's head, its family, the parameters the checkpoint did not provide)."""
    # A local folder by its absolute path, which the adapter records as its base: it then reloads from anywhere.
    source = str(Path(config.model).resolve()) if Path(config.model).exists() else config.model
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
    for key, value in {**task.model_kwargs(family), "pad_token_id": tokenizer.pad_token_id}.items():
        setattr(model_config, key, value)
    if config.from_scratch:  # the checkpoint's architecture and tokenizer, none of its weights
        model = auto_class.from_config(model_config, trust_remote_code=config.trust_remote_code)
        return model, family, []
    model, loading = auto_class.from_pretrained(
        source, config=model_config, trust_remote_code=config.trust_remote_code, output_loading_info=True
    )
    parameters = dict(model.named_parameters())
    return model, family, sorted(k for k in loading["missing_keys"] if k in parameters)


def build_accelerator(config: FinetuneConfig) -> Accelerator:
    """The run's Accelerator: CPU when asked or when no accelerator is available; mixed precision and gradient
    accumulation as configured."""
    return Accelerator(
        cpu=config.cpu if config.cpu is not None else not torch.accelerator.is_available(),
        mixed_precision=config.mixed_precision,
        gradient_accumulation_steps=config.gradient_accumulation_steps,
    )


def finetune(config: FinetuneConfig) -> Path:
    """Fine-tune `config.model` on `config.task`; returns the output folder (metrics, predictions, model, card)."""
    output_dir = Path(config.output_dir)
    accelerator = build_accelerator(config)

    # --- Examples, tokenizer and model with the task's head: `prepare_run` (below).
    task, train_examples, eval_examples, model, missing = prepare_run(config, accelerator)
    tokenizer, family = task.tokenizer, task.family
    base_model = model.name_or_path  # a local folder's absolute path: what an adapter reloads onto

    # --- The method: an adapter freezes the body (and trains the head with it).
    heads = head_modules(model, missing) if task.trains_head else []
    model = apply_method(model, peft_config_for(config, task.peft_task_types[family], heads))
    parameters = count_parameters(model)
    logger.info(
        "%s on %s (%s), method %s: %s of %s parameters trainable (%.3f%%)",
        task.name, config.model, family, config.peft_config or config.method,
        f"{parameters['trainable_parameters']:,}", f"{parameters['total_parameters']:,}",
        100 * parameters["trainable_fraction"],
    )  # fmt: skip

    # --- Features: token ids and targets laid out for the family (see hfzoo/finetuning/task.py).
    train_features = task.encode(train_examples, training=True)
    eval_features = task.encode(eval_examples, training=False)

    # --- AdamW, the loop, validation metrics and the log: `train_and_evaluate` (below).
    run = train_and_evaluate(
        config, task, model, train_features, eval_examples, eval_features, accelerator, learning_rate(config),
        family=family, method=config.peft_config or config.method, train_examples=len(train_examples), **parameters,
    )
    unwrapped = accelerator.unwrap_model(run.model)

    # --- Save: metrics, predictions, the adapter (PEFT format) or the full model, tokenizer, card.
    accelerator.wait_for_everyone()
    method = config.peft_config or config.method
    summary = run_summary(task, base_model, method, parameters, run, len(train_examples), len(eval_examples))
    unwrapped.save_pretrained(output_dir, is_main_process=accelerator.is_main_process, save_function=accelerator.save)
    if accelerator.is_main_process:
        write_results(output_dir, tokenizer, summary, run.records)
        write_finetune_card(output_dir, config, summary)
    accelerator.wait_for_everyone()
    accelerator.end_training()
    return output_dir


def prepare_run(
    config: FinetuneConfig, accelerator: Accelerator
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
    model, family, missing = load_model(config, task, tokenizer)
    task.bind(tokenizer, family)
    return task, train_examples, eval_examples, model, missing


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
    config: FinetuneConfig,
    task: Task,
    model: nn.Module,
    train_features: list[dict],
    eval_examples: list,
    eval_features: list[dict],
    accelerator: Accelerator,
    peak_learning_rate: float,
    **start_fields: Any,
) -> TrainedRun:
    """Train `model`'s trainable parameters on `train_features`, evaluate every `eval_every` steps and at the end,
    and log to `log.jsonl` in `config.output_dir` (`start_fields`, e.g. the method and parameter counts, go into its
    start record). Whatever is frozen stays frozen: the optimizer only sees parameters that require gradients."""
    output_dir = Path(config.output_dir)
    train_loader = DataLoader(
        train_features,
        batch_size=config.per_device_batch_size,
        shuffle=True,
        collate_fn=task.collate,
        generator=torch.Generator().manual_seed(config.seed),
    )

    # --- AdamW on the trainable parameters, linear warmup then cosine decay to zero.
    optimizer = build_optimizer(model, peak_learning_rate, config.weight_decay, (0.9, 0.999), 1e-8)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    steps_per_epoch = math.ceil(len(train_loader) / config.gradient_accumulation_steps)
    max_steps = config.max_steps or math.ceil(config.num_epochs * steps_per_epoch)
    scheduler = build_scheduler(optimizer, round(config.warmup_ratio * max_steps), max_steps, 0.0)
    unwrapped = accelerator.unwrap_model(model)
    reallocates_ranks = hasattr(unwrapped.base_model, "update_and_allocate")  # AdaLoRA's rank budget
    set_seed(config.seed, device_specific=True)  # dropout: a different stream on each process

    log = RunLogger(
        output_dir, enabled=accelerator.is_main_process, max_steps=max_steps, tensorboard=config.tensorboard,
        description=task.name,
    )
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

    def run_evaluation(step: int) -> tuple[dict[str, float], list[dict]]:
        batch_size = config.eval_batch_size or config.per_device_batch_size
        outputs = predict_all(task, model, eval_features, accelerator, batch_size)
        metrics, records = task.finish(eval_examples, eval_features, outputs)
        log.write("eval", step=step, **metrics)
        return metrics, records

    # --- The loop: micro-batches accumulate into optimizer steps; log and evaluate between steps.
    meter, step, tokens_seen = TrainMeter(accelerator), 0, 0
    model.train()
    while step < max_steps:
        for batch in train_loader:
            with accelerator.accumulate(model):
                loss = model(**batch).loss
                accelerator.backward(loss)
                grad_norm = None
                if accelerator.sync_gradients and config.max_grad_norm is not None:
                    grad_norm = accelerator.clip_grad_norm_(model.parameters(), config.max_grad_norm)
                optimizer.step()
                if accelerator.sync_gradients and reallocates_ranks:  # AdaLoRA: from this step's gradients
                    unwrapped.base_model.update_and_allocate(step + 1)
                optimizer.zero_grad()
            meter.add(loss, count_tokens(batch))
            if not accelerator.sync_gradients:
                continue
            scheduler.step()
            step += 1
            log.advance()
            if step % config.log_every == 0 or step == max_steps:
                mean_loss, tokens, tokens_per_s = meter.report()
                tokens_seen += tokens
                grad = None if grad_norm is None else float(grad_norm)
                log.train(step, mean_loss, scheduler.get_last_lr()[0], grad, tokens_per_s, tokens_seen)
            if step == max_steps or (config.eval_every and step % config.eval_every == 0):
                with meter.paused():
                    metrics, records = run_evaluation(step)
            if step >= max_steps:
                break
    log.write("end", step=step, elapsed=round(log.elapsed, 3), **metrics)
    log.close()
    return TrainedRun(model, metrics, records, step, round(step / steps_per_epoch, 2))


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
    output_dir: Path, tokenizer: PreTrainedTokenizerBase, summary: dict[str, Any], records: list[dict]
) -> None:
    """The tokenizer, `metrics.json` and `predictions.jsonl` (one record per validation example) into `output_dir`."""
    tokenizer.save_pretrained(output_dir)
    (output_dir / METRICS_FILE).write_text(json.dumps(summary, indent=2) + "\n")
    with (output_dir / PREDICTIONS_FILE).open("w", encoding="utf-8") as f:
        f.writelines(json.dumps(record, ensure_ascii=False) + "\n" for record in records)


def main(argv: Sequence[str] | None = None) -> Path:
    """Entry point of `recipes/finetune.py` and `hfzoo finetune`: parse `argv`, then `finetune`."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    logging.getLogger("hfzoo").setLevel(logging.INFO)
    try:
        config = parse_args(argv)
    except (ValueError, FileNotFoundError) as error:  # a bad config: say what is wrong, not where in the parser
        raise SystemExit(f"finetune: {error}") from None
    return finetune(config)
