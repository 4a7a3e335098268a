"""A run's output folder and resuming into it: which folder a run may write into, the resolved config it saves
there, and the checks that refuse a resumed run whose config or inputs (tokenizer, data, base model and adapter
files) changed since its checkpoint; what each checkpoint records for those checks.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from ..convert import installed_model_path
from ..core.files import check_output_folder, holds_other_files, write_atomic
from ..core.recipe_config import CONFIG_FILE
from ..tasks import TaskOptions
from .best_model import resumable_keys
from .checkpointing import (
    Progress, check_resumed_config, checkpoint_to_resume, latest_checkpoint, stopped_before_training,
)  # fmt: skip
from .options import CheckpointOptions
from .run_inputs import check_resumed_inputs, run_inputs, tokenizer_file_names

logger = logging.getLogger(__name__)

EVAL_DIR = "eval"  # where an evaluation-only run writes, inside its output_dir


def run_output(
    output_dir: str, do_train: bool, overwrite: bool, command: str, accelerator: Accelerator,
    resumable: Sequence[Path] = (), resume: bool | str = False,
) -> Path:  # fmt: skip
    """The folder a run writes into, once checked (on every process, before any writes).

    A training run writes into `output_dir` when it is new or empty, or holds checkpoints (`--resume` continues
    them; without it the run is refused, by `checkpoint_to_resume`); so may a run whose `resumable` folders hold
    them (compose's baseline), and one where a run stopped before training (`stopped_before_training`). A folder
    holding anything else (a finished run) is refused, naming it, unless `overwrite` (overwrite_output_dir); with
    `resume`, saying that it holds no checkpoint yet (`check_something_to_resume`). An evaluation-only run writes
    into `output_dir/eval/` instead (returned, to become the config's `output_dir`), beside the record of the run it
    evaluates, never over it; an earlier evaluation there is replaced."""
    folder = Path(output_dir)
    if do_train:
        resuming = any(latest_checkpoint(path) is not None for path in (folder, *resumable))
        reusable = resuming or stopped_before_training(folder)
        check_something_to_resume(folder, resume, reusable, overwrite)
        check_output_folder(folder, command, overwrite=overwrite, reusable=reusable)
    else:
        folder = folder / EVAL_DIR
        earlier = (folder / CONFIG_FILE).is_file() and yaml.safe_load((folder / CONFIG_FILE).read_text())
        check_output_folder(folder, command, overwrite=overwrite,
                            reusable=isinstance(earlier, dict) and earlier.get("do_train") is False)  # fmt: skip
    accelerator.wait_for_everyone()  # no process writes before every one has looked
    return folder


def check_something_to_resume(output_dir: str | Path, resume: bool | str, reusable: bool, overwrite: bool) -> None:
    """`--resume` into a folder that holds files but no checkpoint (`reusable` false: nor the folders the run resumes
    besides) is refused saying so: the run there stopped before its first checkpoint, and being told that the folder
    "is not empty" leaves the user looking for a checkpoint that does not exist. An empty or new folder, or one
    `overwrite` lets the run write into, starts fresh (`checkpoint_to_resume`)."""
    if resume is True and not (reusable or overwrite) and holds_other_files(output_dir):
        raise FileNotFoundError(
            f"--resume: {output_dir} holds no checkpoint yet (the run there stopped before its first one, or saved "
            "none): start it again with --overwrite_output_dir true, or choose another --output_dir"
        )


def _local_folder(path: str | None) -> Path | None:
    return Path(path) if path and Path(path).is_dir() else None


def data_sources(config: TaskOptions) -> list[str | None]:
    """The local paths a task run reads its examples from, for `run_inputs` (parallel text: `<file>.<column>`)."""
    files = [config.train_file, config.validation_file]
    sides = [f"{file}.{column}" for file in files if file for column in (config.text_column, config.target_column)
             if column]  # fmt: skip
    return [config.dataset, *files, *sides]


def check_resumable(
    output_dir: str, checkpoints: CheckpointOptions, config_values: dict[str, Any], data: TaskOptions,
    models: Sequence[str], trains_tokenizer: bool = False,
) -> None:  # fmt: skip
    """Before anything is written: a fresh run over checkpoints is refused (`checkpoint_to_resume`), and so is a
    resumed run whose config (`config_values`, outside the keys a resumed run may change), tokenizer files (none
    when the run trains its own: the data decides it), data files or `models` (the folders of the base model and
    adapters it starts from) differ from its checkpoint's."""
    resume_from = checkpoint_to_resume(output_dir, checkpoints.resume)
    if resume_from is None:
        return
    check_resumed_config(resume_from, config_values, resumable_keys(checkpoints.save_best))
    folder = None if trains_tokenizer else _local_folder(installed_model_path(data.tokenizer or data.model))
    check_resumed_inputs(resume_from, folder, data_sources(data), map(installed_model_path, models))


def task_run_inputs(
    output_dir: str | Path, tokenizer: PreTrainedTokenizerBase, data: TaskOptions, models: Sequence[str]
) -> dict:
    """What each checkpoint of the run in `output_dir` records of its inputs (the tokenizer's files, the data files,
    the files of the `models` folders it starts from), for `check_resumable` to compare on resume."""
    return run_inputs(output_dir, _local_folder(tokenizer.name_or_path), tokenizer_file_names(tokenizer),
                      data_sources(data), map(installed_model_path, models))  # fmt: skip


def write_run_config(output_dir: str, config_values: dict[str, Any], accelerator: Accelerator) -> None:
    """The run's resolved config, `training_config.yaml` in its output folder (by the main process)."""
    if accelerator.is_main_process:
        Path(output_dir).mkdir(parents=True, exist_ok=True)
        write_atomic(Path(output_dir) / CONFIG_FILE, yaml.safe_dump(config_values, sort_keys=False))


def nothing_to_do(resume_from: Path | None, progress: Progress, max_steps: int) -> bool:
    """Whether the checkpoint resumed from is already at the run's last step (its outputs are left as they are)."""
    if resume_from is None or progress.step < max_steps:
        return False
    logger.warning("nothing to do: %s is at step %d and the run has %d steps; its outputs are left as they are "
                   "(raise max_steps to train further)", resume_from, progress.step, max_steps)  # fmt: skip
    return True
