"""Model cards generated from what a run wrote: its config, its model config and its JSONL log.

Nothing in a card is typed by hand: the metadata (`library_name`, tags, `pipeline_tag`, datasets,
`model-index` with the final evaluation), the architecture table, the training configuration, the
results and the loss curve (`loss_curve.png`, drawn with matplotlib's Agg canvas, so no display is
needed) all come from the run's files, so a card cannot disagree with the run it describes.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml
from huggingface_hub import EvalResult, ModelCardData
from transformers import PreTrainedConfig

from .presets import preset_description, preset_family
from .recipe_config import CONFIG_FILE
from .training.logging import read_log

if TYPE_CHECKING:
    from .recipes.finetune import FinetuneConfig
    from .recipes.pretrain import PretrainConfig
    from .training.objectives import Objective

LOSS_CURVE = "loss_curve.png"
CARD = "README.md"
DEFAULT_CORPUS = "hfzoo default corpus (Python standard-library docstrings)"

# Config fields shown in the architecture table, in this order, when the model config has them.
ARCHITECTURE_FIELDS = (
    "model_type",
    "num_hidden_layers",
    "num_decoder_layers",
    "hidden_size",
    "num_attention_heads",
    "num_key_value_heads",
    "intermediate_size",
    "activation",
    "norm_type",
    "norm_position",
    "position_embedding",
    "max_position_embeddings",
    "vocab_size",
    "tie_word_embeddings",
    "num_experts",
    "num_experts_per_tok",
    "hidden_dropout",
    "attention_dropout",
)


def plot_loss_curve(records: list[dict[str, Any]], path: str | os.PathLike) -> Path:
    """Training loss (and validation loss where evaluated) against optimizer steps, as a PNG."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    figure = Figure(figsize=(7, 4), dpi=110)
    FigureCanvasAgg(figure)
    axes = figure.add_subplot()
    train = [r for r in records if r["event"] == "train"]
    evals = [r for r in records if r["event"] == "eval"]
    axes.plot([r["step"] for r in train], [r["loss"] for r in train], label="train loss")
    if evals:
        axes.plot([r["step"] for r in evals], [r["eval_loss"] for r in evals], "o-", label="validation loss")
    axes.set_xlabel("optimizer step")
    axes.set_ylabel("loss (nats/token)")
    axes.grid(alpha=0.3)
    axes.legend()
    figure.tight_layout()
    figure.savefig(path)
    return Path(path)


def _dataset(config: PretrainConfig) -> tuple[str, str, list[str] | None]:
    """(name, type, Hub datasets metadata) of the training corpus."""
    if config.dataset is None and config.data_files is None:
        return DEFAULT_CORPUS, "hfzoo-default-corpus", None
    source = config.dataset if config.dataset is not None else str(config.data_files)
    if config.dataset is not None and not os.path.exists(config.dataset):  # a Hub dataset name
        return config.dataset, config.dataset, [config.dataset]
    return f"local files: {source}", "local", None


def _metadata(config: PretrainConfig, objective: Objective, final_eval: dict[str, Any] | None, name: str) -> str:
    dataset_name, dataset_type, datasets = _dataset(config)
    results = []
    if final_eval:
        common = dict(
            task_type=objective.pipeline_tag,
            task_name=objective.task_name,
            dataset_type=dataset_type,
            dataset_name=dataset_name,
            dataset_split="validation",
        )
        results = [
            EvalResult(
                **common,
                metric_type="perplexity",
                metric_value=round(final_eval["perplexity"], 4),
                metric_name="Perplexity",
            ),
            EvalResult(
                **common,
                metric_type="loss",
                metric_value=round(final_eval["eval_loss"], 4),
                metric_name="Validation loss",
            ),
        ]
    data = ModelCardData(
        library_name="transformers",
        pipeline_tag=objective.pipeline_tag,
        tags=["hfzoo", config.preset, preset_family(config.preset), objective.name, "pretraining"],
        datasets=datasets,
        model_name=name,
        eval_results=results or None,
    )
    return data.to_yaml()


def _table(rows: list[tuple[str, Any]], headers: tuple[str, str]) -> str:
    lines = [f"| {headers[0]} | {headers[1]} |", "| --- | --- |"]
    return "\n".join(lines + [f"| {key} | {value} |" for key, value in rows])


def _usage(model_class: str, pipeline_tag: str, name: str) -> str:
    load = (
        f"model = {model_class}.from_pretrained(path)\n"
        "tokenizer = AutoTokenizer.from_pretrained(path)\n"
        f'pipe = pipeline("{pipeline_tag}", model=model, tokenizer=tokenizer)'
    )
    return f"""With hfzoo installed (`import hfzoo` registers the architecture with the Auto classes):

```python
import hfzoo
from transformers import {model_class}, AutoTokenizer, pipeline

path = "{name}"  # this folder, or its Hub repository id
{load}
```

Without hfzoo: the modeling code is saved next to the weights, so transformers runs it when you allow it:

```python
from transformers import {model_class}, AutoTokenizer

model = {model_class}.from_pretrained("{name}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("{name}")
```"""


def render_model_card(
    config: PretrainConfig,
    objective: Objective,
    model_config: PreTrainedConfig,
    records: list[dict[str, Any]],
    name: str,
) -> str:
    """The card's Markdown (with YAML front matter) for a finished run's log `records`."""
    start = next(r for r in records if r["event"] == "start")
    end = next((r for r in reversed(records) if r["event"] == "end"), {})
    evals = [r for r in records if r["event"] == "eval"]
    train = [r for r in records if r["event"] == "train"]
    final_eval = evals[-1] if evals else None
    dataset_name = _dataset(config)[0]
    architecture = [
        ("preset", f"`{config.preset}` ({preset_description(config.preset)})"),
        ("parameters", f"{start['parameters']:,}"),
    ]
    shown = [key for key in ARCHITECTURE_FIELDS if hasattr(model_config, key)]
    if not getattr(model_config, "num_experts", 0):
        shown = [key for key in shown if not key.startswith("num_experts")]
    architecture += [(key, getattr(model_config, key)) for key in shown]
    run = [
        ("objective", f"{objective.name} ({objective.task_name})"),
        ("training data", dataset_name),
        ("processes", f"{start['num_processes']} ({start['distributed_type']}, {start['device']})"),
        ("mixed precision", start["mixed_precision"]),
        ("global batch", f"{start['global_batch_size']} blocks x {config.block_size} tokens"),
        ("optimizer steps", end.get("step", train[-1]["step"] if train else 0)),
        ("tokens seen", f"{end.get('tokens_seen', 0):,}"),
        ("wall time", f"{end.get('elapsed', 0.0):.1f} s"),
    ]
    if train:
        speeds = sorted(r["tokens_per_s"] for r in train)
        run.append(("throughput (median)", f"{speeds[len(speeds) // 2]:,.0f} tokens/s"))
    results = "No evaluation was run."
    if evals:
        rows = [(f"step {r['step']}", f"loss {r['eval_loss']:.4f}, perplexity {r['perplexity']:.2f}") for r in evals]
        results = _table(rows, ("evaluation", "validation"))
    sections = [
        f"---\n{_metadata(config, objective, final_eval, name).rstrip()}\n---",
        f"# {name}\n\nA `{config.preset}` model pretrained from scratch with hfzoo's pretraining recipe "
        f"({objective.task_name.lower()} on {dataset_name}).",
        f"## Results\n\n{results}\n\n![loss curve]({LOSS_CURVE})",
        "## Architecture\n\n" + _table(architecture, ("field", "value")),
        "## Training\n\n" + _table(run, ("setting", "value")),
        f"Full configuration (`{CONFIG_FILE}`):\n\n```yaml\n"
        + yaml.safe_dump(config.to_dict(), sort_keys=False)
        + "```",
        "## How to use\n\n" + _usage(objective.auto_class.__name__, objective.pipeline_tag, name),
    ]
    return "\n\n".join(sections) + "\n"


def write_model_card(
    output_dir: str | os.PathLike, config: PretrainConfig, objective: Objective, model_config: PreTrainedConfig
) -> Path:
    """Write `README.md` and `loss_curve.png` into `output_dir` from its `log.jsonl`; returns the card's path."""
    output_dir = Path(output_dir)
    records = read_log(output_dir)
    plot_loss_curve(records, output_dir / LOSS_CURVE)
    card = output_dir / CARD
    card.write_text(render_model_card(config, objective, model_config, records, output_dir.name), encoding="utf-8")
    return card


# --- Fine-tuning cards (hfzoo.training.finetune): the same principle, from the run's metrics.json and log.jsonl.

# Validation metrics a fine-tuning run can report, with their display names, in display order.
FINETUNE_METRICS = {
    "accuracy": "Accuracy",
    "f1": "F1",
    "matthews_correlation": "Matthews correlation",
    "precision": "Precision",
    "recall": "Recall",
    "exact_match": "Exact match",
    "bleu": "BLEU",
}


def _finetune_usage(summary: dict[str, Any], name: str) -> str:
    auto_class = summary["auto_class"]
    if summary["method"] == "full":
        load = f'model = {auto_class}.from_pretrained("{name}")'
        imports = f"from transformers import {auto_class}, AutoTokenizer"
    else:  # the base with the same head shape, then the adapter (which restores the trained head)
        kwargs = "".join(f", {key}={value!r}" for key, value in summary["model_kwargs"].items())
        load = (
            f'base = {auto_class}.from_pretrained("{summary["model"]}"{kwargs})\n'
            f'model = PeftModel.from_pretrained(base, "{name}")'
        )
        imports = f"from peft import PeftModel\nfrom transformers import {auto_class}, AutoTokenizer"
    return f"""```python
import hfzoo  # registers hfzoo's architectures and its bottleneck adapters with transformers and PEFT
{imports}

{load}
tokenizer = AutoTokenizer.from_pretrained("{name}")
```"""


def render_finetune_card(
    config: FinetuneConfig, summary: dict[str, Any], records: list[dict[str, Any]], name: str
) -> str:
    """The card of a fine-tuning run: `summary` is its metrics.json, `records` its log, `config` its FinetuneConfig."""
    metrics = [(key, summary[key]) for key in FINETUNE_METRICS if key in summary]
    dataset = config.dataset or config.train_file
    is_hub_dataset = config.dataset is not None and not os.path.exists(config.dataset)
    common = dict(task_type=summary["pipeline_tag"], task_name=summary["task"], dataset_type=dataset,
                  dataset_name=dataset, dataset_split="validation")  # fmt: skip
    data = ModelCardData(
        library_name="transformers" if summary["method"] == "full" else "peft",
        base_model=None if os.path.exists(summary["model"]) else summary["model"],
        pipeline_tag=summary["pipeline_tag"],
        tags=["hfzoo", "fine-tuning", summary["task"], summary["method"]],
        datasets=[config.dataset] if is_hub_dataset else None,
        model_name=name,
        eval_results=[
            EvalResult(**common, metric_type=key, metric_value=round(value, 4), metric_name=FINETUNE_METRICS[key])
            for key, value in metrics
        ] or None,
    )
    train = [r for r in records if r["event"] == "train"]
    results = _table([(FINETUNE_METRICS[key], f"{value:.4f}") for key, value in metrics], ("metric", "validation"))
    parameters = [
        ("method", summary["method"]),
        ("trainable parameters", f"{summary['trainable_parameters']:,}"),
        ("total parameters", f"{summary['total_parameters']:,}"),
        ("trainable fraction", f"{100 * summary['trainable_fraction']:.3f}%"),
    ]
    run = [
        ("base model", f"`{summary['model']}` ({summary['family']})"),
        ("data", f"{dataset}: {summary['train_examples']} training, {summary['eval_examples']} validation examples"),
        ("optimizer steps", f"{summary['steps']} ({summary['epochs']} epochs)"),
        ("final training loss", f"{train[-1]['loss']:.4f}" if train else "not logged"),
    ]
    sections = [
        f"---\n{data.to_yaml().rstrip()}\n---",
        f"# {name}\n\n`{summary['model']}` fine-tuned for {summary['task']} with hfzoo's fine-tuning recipe "
        f"(method: {summary['method']}; {100 * summary['trainable_fraction']:.3f}% of the parameters trained).",
        f"## Results\n\nOn {summary['eval_examples']} validation examples:\n\n{results}\n\n![loss curve]({LOSS_CURVE})",
        "## Parameters\n\n" + _table(parameters, ("", "value")),
        "## Training\n\n" + _table(run, ("setting", "value")),
        f"Full configuration (`{CONFIG_FILE}`):\n\n```yaml\n{yaml.safe_dump(config.to_dict(), sort_keys=False)}```",
        "## How to use\n\n" + _finetune_usage(summary, name),
    ]
    return "\n\n".join(sections) + "\n"


def write_finetune_card(output_dir: str | os.PathLike, config: FinetuneConfig, summary: dict[str, Any]) -> Path:
    """Write `README.md` and `loss_curve.png` (training loss) for a fine-tuning run into `output_dir`."""
    output_dir = Path(output_dir)
    records = read_log(output_dir)
    plot_loss_curve([r for r in records if r["event"] == "train"], output_dir / LOSS_CURVE)
    card = output_dir / CARD
    card.write_text(render_finetune_card(config, summary, records, output_dir.name), encoding="utf-8")
    return card
