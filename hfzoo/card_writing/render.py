"""The card renderer: a run record (plain data) plus an ordered list of sections gives the Markdown.

A recipe never edits a finished card: it picks the sections it wants (the pretraining, fine-tuning or composition
lists, or its own `Section`s) and the renderer joins them under YAML front matter. Everything a section shows comes
from the record, which holds only what the run wrote (resolved config, log records, summary, model config), so a
card cannot disagree with its run. This module imports no training code: the record is built by whoever has the
run's files.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from huggingface_hub import EvalResult, ModelCardData
from huggingface_hub.errors import HFValidationError
from huggingface_hub.utils import validate_repo_id

from ..core.files import write_atomic
from ..core.recipe_config import CONFIG_FILE
from ..core.recorded_paths import MINILM_PACKAGE, config_path, resolve_recorded

CARD = "README.md"
LOSS_CURVE = "loss_curve.png"
# The libraries a card may name: the one that loads the folder it describes (a model through transformers' Auto
# classes, a single adapter through PEFT, a composition through `hfzoo.adapters.load_composition`).
LIBRARIES = ("transformers", "peft", "hfzoo")
LOCAL_DATA = "local"  # the model-index dataset type of data that is not on the Hub


@dataclass
class RunRecord:
    """What a card is made from. `summary` is what the recipe knows beyond config and log: a fine-tuning or
    composition run's metrics.json, or for pretraining the objective's description (`describe_objective`)."""

    name: str  # the output folder's name: the card's title and the path its usage code loads
    config: dict[str, Any]  # the resolved config, as training_config.yaml holds it
    log: list[dict[str, Any]] = field(default_factory=list)  # log.jsonl's records, in order
    summary: dict[str, Any] = field(default_factory=dict)
    model_config: dict[str, Any] = field(default_factory=dict)  # the trained model's config (`config.to_dict()`)

    def events(self, event: str) -> list[dict[str, Any]]:
        """The log records of one kind (`start`, `train`, `eval`, `end`, ...), in order."""
        return [record for record in self.log if record["event"] == event]


def shown_path(path: str, record: RunRecord) -> str:
    """A path as a card shows it: an absolute one (an older run's record of the base-model folder, an adapter folder,
    a data file given by its absolute path) relative to the folder holding the run folder, from where the card's
    code loads the run as `record.name`; one outside that folder (`../../../…/shared/data/conll2003` from a run in
    `runs/results/`) as a config records it (`config_path`: relative to the working directory, else by its name),
    so a card holds no path of the machine that made it. A relative path or a Hub name is shown as given. The run
    folder is `output_dir` of the resolved config (relative to the working directory of the recipe, which writes
    the card)."""
    if not os.path.isabs(path):
        return path
    run_folder = Path(record.config.get("output_dir") or record.name).resolve()
    shown = Path(os.path.relpath(path, run_folder.parent)).as_posix()
    return config_path(path) if shown.startswith("../") else shown


def shown_recorded_path(path: str, record: RunRecord) -> str:
    """A path from the run's `metrics.json` as a card shows it (see `shown_path`): a local one is recorded relative
    to the run folder (`hfzoo.core.recorded_paths`), an older run's is absolute; a Hub or package name as it is."""
    return shown_path(resolve_recorded(path, record.name), record)


def shown_paths(value: Any, record: RunRecord) -> Any:
    """A config value (a string, or lists and dicts of them) in its own shape, each path as `shown_path` shows it."""
    if isinstance(value, str):
        return shown_path(value, record)
    if isinstance(value, dict):
        return {key: shown_paths(item, record) for key, item in value.items()}
    if isinstance(value, list):
        return [shown_paths(item, record) for item in value]
    return value


def hub_id(name: str | None) -> str | None:
    """`name` if it can only be a Hub repository id, else None: the Hub metadata (`datasets`, `base_model`) may name
    only what the Hub holds. Not one: a path that exists here, an absolute one (it existed where the run was made),
    one recorded relative to a folder (`./`, `../`), one deeper than `owner/name` (`runs/data/x`), the package name
    a record gives the installed all-MiniLM-L6-v2, or anything the Hub would refuse as a repository id."""
    if not name or os.path.isabs(name) or name.startswith(("./", "../")) or name == MINILM_PACKAGE:
        return None
    try:
        validate_repo_id(name)
    except HFValidationError:
        return None
    return None if os.path.exists(name) else name


Text = str | Callable[[RunRecord], str]


@dataclass(frozen=True)
class Section:
    """One part of a card: a heading (none for a paragraph that continues the previous section) and a body, each
    fixed text or a function of the record, so one list of sections serves every run of a recipe."""

    title: Text | None
    body: Text
    level: int = 2

    def render(self, record: RunRecord) -> str:
        body = self.body(record) if callable(self.body) else self.body
        if self.title is None:
            return body
        title = self.title(record) if callable(self.title) else self.title
        return f"{'#' * self.level} {title}\n\n{body}"


def markdown_table(headers: Sequence[Any], rows: Sequence[Sequence[Any]]) -> str:
    """A GitHub Markdown table; every card and generated document uses this one format."""
    lines = ["| " + " | ".join(map(str, headers)) + " |", "|" + " --- |" * len(headers)]
    return "\n".join(lines + ["| " + " | ".join(map(str, row)) + " |" for row in rows])


def model_card_data(
    name: str | None,
    tags: list[str],
    *,
    pipeline_tag: str | None = None,
    task_name: str | None = None,
    dataset: tuple[str, str] | None = None,
    metrics: Sequence[tuple[str, str, float]] = (),
    library_name: str = "transformers",
    base_model: str | None = None,
    datasets: list[str] | None = None,
) -> ModelCardData:
    """The Hub metadata of a card. `metrics` are (type, display name, value) validation results on `dataset`
    (type: a Hub dataset id or `LOCAL_DATA`, name); they become the `model-index` that the Hub shows as the model's
    evaluation. `library_name` is one of `LIBRARIES`; `base_model` and `datasets` hold Hub ids only (`hub_id`)."""
    if library_name not in LIBRARIES:
        raise ValueError(f"library_name {library_name!r}: a card names the library that loads it, one of {LIBRARIES}")
    not_on_hub = [name for name in [base_model, *(datasets or [])] if name is not None and hub_id(name) is None]
    if not_on_hub:
        raise ValueError(f"{not_on_hub}: not Hub ids; the Hub metadata names a base model or data set on the Hub only")
    results = []
    if metrics:
        dataset_type, dataset_name = dataset or (None, None)
        results = [
            EvalResult(task_type=pipeline_tag, task_name=task_name, dataset_type=dataset_type,
                       dataset_name=dataset_name, dataset_split="validation", metric_type=metric_type,
                       metric_value=value, metric_name=metric_name)
            for metric_type, metric_name, value in metrics
        ]  # fmt: skip
    return ModelCardData(
        library_name=library_name, base_model=base_model, pipeline_tag=pipeline_tag, tags=tags, datasets=datasets,
        model_name=name, eval_results=results or None,
    )  # fmt: skip


def configuration_section(record: RunRecord) -> str:
    """The resolved config as YAML, so the run can be repeated from its card alone (absolute paths as `shown_path`
    shows them)."""
    config = yaml.safe_dump(shown_paths(record.config, record), sort_keys=False)
    return f"Full configuration (`{CONFIG_FILE}`):\n\n```yaml\n{config}```"


CONFIGURATION = Section(None, configuration_section)


def render_card(record: RunRecord, sections: Sequence[Section], metadata: ModelCardData | None = None) -> str:
    """The card's Markdown: front matter from `metadata`, then each section in order, blank-line separated."""
    parts = [f"---\n{metadata.to_yaml().rstrip()}\n---"] if metadata is not None else []
    parts += [section.render(record) for section in sections]
    return "\n\n".join(parts) + "\n"


def write_card(
    output_dir: str | os.PathLike,
    record: RunRecord,
    sections: Sequence[Section],
    metadata: ModelCardData | None = None,
    *,
    loss_curve: bool = True,
) -> Path:
    """Write `README.md` (and, with `loss_curve`, the `loss_curve.png` the results sections show) into
    `output_dir`; returns the card's path."""
    output_dir = Path(output_dir)
    if loss_curve:
        plot_loss_curve(record, output_dir / LOSS_CURVE)
    return write_atomic(output_dir / CARD, render_card(record, sections, metadata))


@dataclass(frozen=True)
class Curve:
    """One line of a loss plot: x and y values, its legend label and its matplotlib format and opacity."""

    x: list[float]
    y: list[float]
    label: str
    fmt: str = "-"
    alpha: float = 1.0


def plot_losses(
    path: str | os.PathLike,
    curves: Sequence[Curve],
    *,
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    baseline: tuple[float, str] | None = None,
    beside: tuple[Sequence[Curve], str] | None = None,
    dpi: int = 110,
) -> Path:
    """Loss curves (and a dashed horizontal `baseline` (value, label)) as a PNG, drawn on matplotlib's Agg canvas
    so no display is needed. `beside`: (curves, x label) of a second panel on the right, on the same loss axis: the
    same losses against another x (optimizer steps beside seconds, say)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    panels = [(curves, xlabel), *([beside] if beside is not None else [])]
    figure = Figure(figsize=(7 if beside is None else 12, 4), dpi=dpi)
    FigureCanvasAgg(figure)
    first = None
    for index, (panel_curves, panel_xlabel) in enumerate(panels, 1):
        axes = figure.add_subplot(1, len(panels), index, sharey=first)
        for curve in panel_curves:
            axes.plot(curve.x, curve.y, curve.fmt, alpha=curve.alpha, label=curve.label)
        if baseline is not None:
            axes.axhline(baseline[0], color="gray", ls="--", label=baseline[1])
        axes.set_xlabel(panel_xlabel)
        axes.grid(alpha=0.3)
        axes.legend()
        first = first or axes
    first.set_ylabel(ylabel)
    if title:  # over both panels, or over the one
        (first.set_title if beside is None else figure.suptitle)(title, fontsize=10)
    figure.tight_layout()
    figure.savefig(path)
    return Path(path)


def plot_loss_curve(record: RunRecord, path: str | os.PathLike) -> Path:
    """Training loss, and validation loss where the evaluations measured one (pretraining does; a task's
    evaluation reports its metrics instead), against optimizer steps."""
    train = record.events("train")
    evals = [r for r in record.events("eval") if "eval_loss" in r]
    curves = [Curve([r["step"] for r in train], [r["loss"] for r in train], "train loss")]
    if evals:
        curves.append(Curve([r["step"] for r in evals], [r["eval_loss"] for r in evals], "validation loss", "o-"))
    return plot_losses(path, curves, xlabel="optimizer step", ylabel="loss (nats/token)")
