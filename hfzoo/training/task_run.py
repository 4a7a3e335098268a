"""The skeleton both recipes that train on a labelled task share (fine-tuning, `hfzoo.commands.finetune`, and
composition, `hfzoo.commands.compose`), in the order they call it: the task and its examples (`read_task_examples`),
the model with the task's head (`load_task_model`), an evaluation-only run (`evaluate_only`), and `TaskTraining`,
what a training run keeps and does between its optimizer steps (resume, the best model, the log, the evaluations,
the checkpoints, the model saved after the last step, the last step's checkpoint). What the run leaves is written by
`task_results`.

The recipes hold what differs: the tokenizer and the method (an adapter, or the composition), the optimizer and the
schedule, the loop itself (`hfzoo.training.loop.TrainingSteps`) and the summary's own entries.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from accelerate import Accelerator
from accelerate.utils import set_seed
from torch import nn

from ..core.recorded_paths import recorded_path
from ..tasks import TASK_CLASSES, Task, TaskOptions, load_examples
from .best_model import BestModel, ranking_metric, save_published
from .checkpointing import Progress, inexact_resume, resume_state, save_checkpoint
from .evaluation import TrainedRun, predict_all
from .logging import RunLogger
from .loop import TrainingSteps
from .options import CheckpointOptions, RunOptions, TaskTrainingOptions
from .sharding import is_sharded
from .run_folder import check_resumable, nothing_to_do, task_run_inputs, write_run_config
from .task_model import check_model_paths


class TaskRunConfig(Protocol):
    """What the two task recipes' configs (`FinetuneConfig`, `ComposeConfig`) have in common."""

    output_dir: str
    do_train: bool
    data: TaskOptions
    training: TaskTrainingOptions
    checkpoints: CheckpointOptions
    run: RunOptions

    def to_dict(self) -> dict[str, Any]: ...

    def model_folders(self) -> list[str]: ...


def read_task_examples(
    config: TaskRunConfig, accelerator: Accelerator, trains_tokenizer: bool = False
) -> tuple[Task, list, list]:
    """(the task, its training examples, its validation examples), labels fitted on them; a malformed row fails
    naming its file and line. Before anything is written, a fresh run over checkpoints, or a resumed one whose config
    or inputs changed, is refused (`trains_tokenizer`: the run's tokenizer files are its own, not compared). Then the
    seed is set for the new head's initialisation (the same on every process)."""
    task = TASK_CLASSES[config.data.task](config.data)
    check_model_paths(config.data)
    config_values = config.to_dict()
    if config.do_train:
        check_resumable(config.output_dir, config.checkpoints, config_values, config.data, config.model_folders(),
                        trains_tokenizer)  # fmt: skip
    train_examples, eval_examples = load_examples(task, config.data)
    task.fit_labels(train_examples, eval_examples)
    set_seed(config.run.seed)
    return task, train_examples, eval_examples


def start_task_log(
    config: TaskRunConfig, task: Task, accelerator: Accelerator, max_steps: int, progress: Progress, **fields: Any
) -> RunLogger:
    """The run's `log.jsonl` (and TensorBoard), opened with its start record: the task, `fields`, the config; and
    its config saved, `training_config.yaml`: here, once every check has passed, so a refused run leaves none."""
    write_run_config(config.output_dir, config.to_dict(), accelerator)
    log = RunLogger(
        config.output_dir, enabled=accelerator.is_main_process, max_steps=max_steps, start_step=progress.step,
        elapsed=progress.elapsed, tensorboard=config.training.tensorboard, description=task.name,
    )  # fmt: skip
    log.write("start", step=progress.step, task=task.name, **fields, num_processes=accelerator.num_processes,
              device=str(accelerator.device), max_steps=max_steps, config=config.to_dict())  # fmt: skip
    return log


def evaluate_task(
    config: TaskRunConfig, task: Task, model: nn.Module, eval_examples: list, eval_features: list[dict],
    accelerator: Accelerator,
) -> tuple[dict[str, float], list[dict]]:  # fmt: skip
    """(validation metrics, one prediction record per validation example), in batches of `eval_batch_size`."""
    batch_size = config.training.eval_batch_size or config.training.per_device_batch_size
    return task.finish(eval_examples, eval_features, predict_all(task, model, eval_features, accelerator, batch_size))


def evaluate_only(
    config: TaskRunConfig, task: Task, model: nn.Module, eval_examples: list, eval_features: list[dict],
    accelerator: Accelerator, **start_fields: Any,
) -> TrainedRun:  # fmt: skip
    """`do_train: false`: evaluate `model` (already trained) once, logging to `log.jsonl` as a run of 0 steps."""
    model = accelerator.prepare(model)
    log = start_task_log(config, task, accelerator, 0, Progress(), **start_fields, eval_examples=len(eval_examples))
    metrics, records = evaluate_task(config, task, model, eval_examples, eval_features, accelerator)
    log.write("eval", step=0, **metrics)
    log.write("end", step=0, elapsed=round(log.elapsed, 3), **metrics)
    log.close()
    return TrainedRun(model, metrics, records, 0, 0.0)


class TaskTraining:
    """What a task recipe's training run keeps and does between its optimizer steps.

    Made once the model, optimizer, batches and schedule are prepared and registered: it registers the best model's
    record (`save_best`: the best evaluation's model, saved by `save_model(folder)` into `best/`), seeds dropout
    differently on each process, and resumes from the latest checkpoint (`resume`), into `progress`. `start` opens
    the log and returns the loop's `TrainingSteps`; `between_steps` after each optimizer step saves the model into
    `output_dir` after the last one (before the final evaluation: a failure there loses no training), evaluates every
    `eval_every` steps and at the last, and checkpoints every `save_every`; `finish` closes the log, and
    `checkpoint_last_step`, once the recipe has written the run's outputs, checkpoints the last step.
    """

    def __init__(
        self, config: TaskRunConfig, accelerator: Accelerator, task: Task, save_model: Callable[[Path], None],
        max_steps: int,
    ) -> None:  # fmt: skip
        checkpoints, output_dir = config.checkpoints, Path(config.output_dir)
        self.config, self.accelerator, self.task, self.save_model = config, accelerator, task, save_model
        self.output_dir, self.max_steps, self.config_values = output_dir, max_steps, config.to_dict()
        self.best = None
        if checkpoints.save_best:  # the best evaluation's model in best/, its record in each checkpoint
            metric = ranking_metric(task.name, checkpoints.best_metric)
            self.best = BestModel(metric, output_dir, save_model, accelerator)
            accelerator.register_for_checkpointing(self.best)
        set_seed(config.run.seed, device_specific=True)  # dropout: a different stream on each process
        # The state of every prepared and registered object; a resumed run continues exactly.
        saves = checkpoints.save_every is not None
        self.resume_from, self.progress = resume_state(accelerator, output_dir, checkpoints.resume, saves)
        # What each checkpoint records of the tokenizer, data, base and adapters, to check on resume.
        self.inputs = task_run_inputs(output_dir, task.tokenizer, config.data, config.model_folders())
        self.metrics: dict[str, float] = {}
        self.records: list[dict] = []

    def nothing_to_do(self) -> bool:
        """Whether the checkpoint resumed from is already at the run's last step (its outputs are left as they are)."""
        return nothing_to_do(self.resume_from, self.progress, self.max_steps)

    def start(
        self, model: nn.Module, scheduler: Any, batches: Any, train_features: int, eval_examples: list,
        eval_features: list[dict], **fields: Any,
    ) -> TrainingSteps:  # fmt: skip
        """Open the run's log with its start record (`fields`, whether the model is sharded, whether the run resumed,
        and exactly) and return the loop's bookkeeping over `batches`; `model` is evaluated on `eval_features`
        between steps."""
        accelerator, resume_from, run = self.accelerator, self.resume_from, self.config.run
        self.model, self.eval_examples, self.eval_features = model, eval_examples, eval_features
        inexact = None  # why a resume is not exact (none: it is); None: not resumed
        if resume_from is not None:
            per_process = self.config.training.per_device_batch_size * run.gradient_accumulation_steps
            inexact = inexact_resume(resume_from, self.progress, accelerator.num_processes, self.max_steps, per_process)
        resumed = recorded_path(resume_from, self.output_dir) if resume_from else None  # no path of the machine
        self.log = start_task_log(self.config, self.task, accelerator, self.max_steps, self.progress, **fields,
                                  sharded=is_sharded(model), resumed_from=resumed,
                                  resumed_exactly=None if inexact is None else not inexact, not_exact_because=inexact,
                                  train_features=train_features, eval_examples=len(eval_examples))  # fmt: skip
        self.steps = TrainingSteps(accelerator, model, scheduler, batches, self.task.collate, self.progress, self.log,
                                   self.max_steps, self.config.run)  # fmt: skip
        return self.steps

    def between_steps(self) -> None:
        """After an optimizer step: the model saved after the last step, an evaluation and a checkpoint when due."""
        steps, progress, checkpoints = self.steps, self.progress, self.config.checkpoints
        with steps.paused():
            if steps.last:
                save_published(self.accelerator, self.save_model, self.output_dir)
            if steps.due(self.config.training.eval_every):
                self.metrics, self.records = evaluate_task(self.config, self.task, self.model, self.eval_examples,
                                                           self.eval_features, self.accelerator)  # fmt: skip
                if self.best is not None:
                    self.best.update(progress.step, self.metrics)
                if self.metrics:
                    self.log.write("eval", step=progress.step, **self.metrics)
            if steps.checkpoint_due(checkpoints.save_every):
                path = recorded_path(self._checkpoint(), self.output_dir)
                self.log.write("checkpoint", step=progress.step, path=path)

    def _checkpoint(self) -> Path:
        return save_checkpoint(self.accelerator, self.output_dir, self.steps.checkpoint_progress(), None,
                               self.config.checkpoints.keep_checkpoints, self.config_values, self.inputs,
                               sharded=self.config.run.sharding == "fsdp")  # fmt: skip

    def checkpoint_last_step(self) -> None:
        """Once the run's outputs are all written, by every process: its last step's checkpoint, when it checkpoints
        (`TrainingSteps.last_checkpoint_due`), so that the run extended with a larger max_steps resumes there."""
        if self.steps.last_checkpoint_due(self.config.checkpoints.save_every):
            self._checkpoint()

    def finish(self, steps_per_epoch: int) -> TrainedRun:
        """The end record in the log (the final metrics, the best evaluation), closed; what the run trained."""
        step, best = self.progress.step, None if self.best is None else self.best.record()
        self.log.write("end", step=step, elapsed=round(self.log.elapsed, 3), **self.metrics,
                       **({"best": best} if best else {}))  # fmt: skip
        self.log.close()
        return TrainedRun(self.model, self.metrics, self.records, step, round(step / steps_per_epoch, 2), best)
