"""The recipes' current card calls, on the new renderer, until the recipes build their `RunRecord` themselves
(with `hfzoo.training.logging.read_log`) and call `write_card` directly; then this module goes.

The log is read here without the training package's `read_log`, because cards sit below training.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from .finetuning import FINETUNE_SECTIONS, finetune_metadata
from .pretraining import PRETRAINING_SECTIONS, describe_objective, pretraining_metadata
from .render import RunRecord, render_card, write_card


def _log(output_dir: Path) -> list[dict[str, Any]]:
    lines = (output_dir / "log.jsonl").read_text(encoding="utf-8").splitlines()
    return [json.loads(line) for line in lines if line.strip()]


def _pretraining_record(config: Any, objective: Any, model_config: Any, records: list, name: str) -> RunRecord:
    return RunRecord(name, config.to_dict(), records, describe_objective(objective), model_config.to_dict())


def render_model_card(config: Any, objective: Any, model_config: Any, records: list[dict[str, Any]], name: str) -> str:
    """The pretraining card's Markdown for a finished run's log `records`."""
    record = _pretraining_record(config, objective, model_config, records, name)
    return render_card(record, PRETRAINING_SECTIONS, pretraining_metadata(record))


def write_model_card(output_dir: str | os.PathLike, config: Any, objective: Any, model_config: Any) -> Path:
    """Write the pretraining card and its loss curve into `output_dir` from its `log.jsonl`."""
    output_dir = Path(output_dir)
    record = _pretraining_record(config, objective, model_config, _log(output_dir), output_dir.name)
    return write_card(output_dir, record, PRETRAINING_SECTIONS, pretraining_metadata(record))


def write_finetune_card(output_dir: str | os.PathLike, config: Any, summary: dict[str, Any]) -> Path:
    """Write the fine-tuning card and its loss curve into `output_dir` from its `log.jsonl` and `summary`."""
    output_dir = Path(output_dir)
    record = RunRecord(output_dir.name, config.to_dict(), _log(output_dir), summary)
    return write_card(output_dir, record, FINETUNE_SECTIONS, finetune_metadata(record))
