"""What a run on a labelled task leaves in its output folder: `metrics.json` (the summary the card is made from),
`predictions.jsonl`, the tokenizer and the model card.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from accelerate import Accelerator
from transformers import PreTrainedTokenizerBase

from ..card_writing import RunRecord, Section, bottleneck_loading, finetune_metadata, write_card
from ..core.files import write_atomic
from ..core.recorded_paths import config_path, recorded_path
from ..tasks import Task
from .evaluation import TrainedRun
from .logging import read_log

logger = logging.getLogger(__name__)
METRICS_FILE = "metrics.json"
PREDICTIONS_FILE = "predictions.jsonl"


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
    accelerator: Accelerator,
    output_dir: Path,
    tokenizer: PreTrainedTokenizerBase,
    config_values: dict[str, Any],
    summary: dict[str, Any],
    predictions: list[dict],
    card_sections: Sequence[Section] | None,
) -> None:
    """The tokenizer, `metrics.json`, `predictions.jsonl` (one record per validation example) and the model card
    (`card_sections` rendered from `config_values`, the run's log and `summary`) into `output_dir`, by the main
    process, while the others wait. Each prediction's `where` names its file as the config does (`_recorded_where`).
    No card for an evaluation-only run (`card_sections` None): the folder holds no model for a card to describe."""
    if accelerator.is_main_process:
        tokenizer.save_pretrained(output_dir)
        write_atomic(output_dir / METRICS_FILE, json.dumps(summary, indent=2) + "\n")
        lines = "".join(json.dumps(_recorded_where(p), ensure_ascii=False) + "\n" for p in predictions)
        write_atomic(output_dir / PREDICTIONS_FILE, lines)
        if card_sections is not None:
            record = RunRecord(output_dir.name, config_values, read_log(output_dir), summary)
            write_card(output_dir, record, card_sections, finetune_metadata(record))
            if summary["method"] == "bottleneck":  # said where it is saved: PEFT alone cannot load it
                logger.info(bottleneck_loading(str(output_dir)))
    accelerator.wait_for_everyone()


def _recorded_where(prediction: dict) -> dict:
    """`prediction` with its `where` ("path, line N", `hfzoo.tasks.records`) naming the file as the run's config
    names it (`config_path`: no path of the machine; a question-answering prediction names its question id instead);
    an error message names the file in full, for the one who reads it."""
    if "where" not in prediction:
        return prediction
    path, separator, rest = prediction["where"].partition(", ")
    return {**prediction, "where": config_path(path) + separator + rest}
