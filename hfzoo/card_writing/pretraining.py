"""The pretraining card: what was trained (preset, architecture), on what, how, how well, and how to load it.

The objective's description travels in the record's summary (`describe_objective`), so this module needs nothing
from the training package: an objective is anything with a name, a task name, a pipeline tag and an Auto class.
"""

from __future__ import annotations

from typing import Any

from huggingface_hub import ModelCardData
from transformers.pipelines import get_supported_tasks

from ..core.presets import preset_description, preset_family
from .render import (
    CONFIGURATION, LOCAL_DATA, LOSS_CURVE, RunRecord, Section, hub_id, markdown_table, model_card_data, shown_paths,
)  # fmt: skip

DEFAULT_CORPUS = "hfzoo default corpus (Python standard-library docstrings)"
DEFAULT_CORPUS_TYPE = "hfzoo-default-corpus"  # its model-index type: it ships inside hfzoo, on no Hub

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


def describe_objective(objective: Any) -> dict[str, str]:
    """A pretraining run's summary: its objective (a `hfzoo.objectives.objective.Objective`) as plain data."""
    return {
        "objective": objective.name,
        "task_name": objective.task_name,
        "pipeline_tag": objective.pipeline_tag,
        "auto_class": objective.auto_class.__name__,
    }


def architecture_rows(model_config: dict[str, Any]) -> list[tuple[str, Any]]:
    """The `ARCHITECTURE_FIELDS` the model config has, without the expert counts of a dense model."""
    shown = [key for key in ARCHITECTURE_FIELDS if key in model_config]
    if not model_config.get("num_experts"):
        shown = [key for key in shown if not key.startswith("num_experts")]
    return [(key, model_config[key]) for key in shown]


def training_data(record: RunRecord) -> tuple[str, str, list[str] | None]:
    """(name, model-index type, Hub `datasets` metadata) of the training corpus; a local path as `shown_path` shows
    it and typed `LOCAL_DATA`."""
    dataset, data_files = record.config.get("dataset"), record.config.get("data_files")
    if dataset is None and data_files is None:
        return DEFAULT_CORPUS, DEFAULT_CORPUS_TYPE, None
    if hub_id(dataset) is not None:
        return dataset, dataset, [dataset]
    files = shown_paths(dataset if dataset is not None else data_files, record)
    return f"local files: {files}", LOCAL_DATA, None


def pretraining_metadata(record: RunRecord) -> ModelCardData:
    """Tags (preset, family, objective), the corpus when it is on the Hub, and the final validation loss and
    perplexity as the model-index."""
    preset, summary = record.config["preset"], record.summary
    dataset_name, dataset_type, datasets = training_data(record)
    evals = record.events("eval")
    metrics = []
    if evals:
        final = evals[-1]
        metrics = [("perplexity", "Perplexity", round(final["perplexity"], 4)),
                   ("loss", "Validation loss", round(final["eval_loss"], 4))]  # fmt: skip
        if "eval_next_sentence_accuracy" in final:
            metrics.append(("accuracy", "Next-sentence accuracy", round(final["eval_next_sentence_accuracy"], 4)))
    return model_card_data(
        record.name, ["hfzoo", preset, preset_family(preset), summary["objective"], "pretraining"],
        pipeline_tag=summary["pipeline_tag"], task_name=summary["task_name"], dataset=(dataset_type, dataset_name),
        metrics=metrics, datasets=datasets,
    )  # fmt: skip


def _intro(record: RunRecord) -> str:
    return (
        f"A `{record.config['preset']}` model pretrained from scratch with hfzoo's pretraining recipe "
        f"({record.summary['task_name'].lower()} on {training_data(record)[0]})."
    )


def _accuracy(evaluation: dict) -> str:
    """The masked LM's token accuracy and next-sentence prediction's accuracy (chance: 0.5), where the objective
    has them."""
    shown = [(key, name) for key, name in (("eval_token_accuracy", "token accuracy"),
             ("eval_next_sentence_accuracy", "next-sentence accuracy")) if key in evaluation]  # fmt: skip
    return "".join(f", {name} {evaluation[key]:.3f}" for key, name in shown)


def _results(record: RunRecord) -> str:
    evals = record.events("eval")
    results = "No evaluation was run."
    if evals:
        rows = [(f"step {r['step']}", f"loss {r['eval_loss']:.4f}, perplexity {r['perplexity']:.2f}{_accuracy(r)}")
                for r in evals]  # fmt: skip
        results = markdown_table(("evaluation", "validation"), rows)
    return f"{results}\n\n![loss curve]({LOSS_CURVE})"


def _architecture(record: RunRecord) -> str:
    preset = record.config["preset"]
    rows = [
        ("preset", f"`{preset}` ({preset_description(preset)})"),
        ("parameters", f"{record.events('start')[0]['parameters']:,}"),
        *architecture_rows(record.model_config),
    ]
    return markdown_table(("field", "value"), rows)


def _training(record: RunRecord) -> str:
    start, train = record.events("start")[0], record.events("train")
    end = (record.events("end") or [{}])[-1]
    rows = [
        ("objective", f"{record.summary['objective']} ({record.summary['task_name']})"),
        ("training data", training_data(record)[0]),
        ("processes", f"{start['num_processes']} ({start['distributed_type']}, "
                      f"{'FSDP2-sharded, ' if start.get('sharded') else ''}{start['device']})"),
        ("mixed precision", start["mixed_precision"]),
        ("global batch", f"{start['global_batch_size']} blocks x {record.config['block_size']} tokens"),
        ("optimizer steps", end.get("step", train[-1]["step"] if train else 0)),
        ("tokens seen", f"{end.get('tokens_seen', 0):,}"),
        ("wall time", f"{end.get('elapsed', 0.0):.1f} s"),
    ]
    if resumes := [r for r in record.events("start") if r.get("resumed_from")]:
        rows.append(("resumed", "; ".join(
            f"at step {r['step']} on {r['num_processes']} processes, "
            + ("bit-exact" if r.get("resumed_exactly", True) else
               f"not bit-exact ({'; '.join(r.get('not_exact_because') or ['saved by another number of processes'])})")
            for r in resumes)))  # fmt: skip
    if train:
        speeds = sorted(r["tokens_per_s"] for r in train)
        rows.append(("throughput (median)", f"{speeds[len(speeds) // 2]:,.0f} tokens/s"))
    return markdown_table(("setting", "value"), rows)


def _usage(record: RunRecord) -> str:
    name, model_class, pipeline_tag = record.name, record.summary["auto_class"], record.summary["pipeline_tag"]
    imports = f"{model_class}, AutoTokenizer, pipeline"
    use = f'pipe = pipeline("{pipeline_tag}", model=model, tokenizer=tokenizer)'
    if pipeline_tag not in get_supported_tasks():  # a Hub tag transformers 5 has no pipeline for (text2text-generation)
        imports = f"{model_class}, AutoTokenizer"
        use = 'output_ids = model.generate(**tokenizer("...", return_tensors="pt"))'
    return f"""With hfzoo installed (`import hfzoo` registers the architecture with the Auto classes):

```python
import hfzoo
from transformers import {imports}

path = "{name}"  # this folder, or its Hub repository id
model = {model_class}.from_pretrained(path)
tokenizer = AutoTokenizer.from_pretrained(path)
{use}
```

Without hfzoo: the modeling code is saved next to the weights, so transformers runs it when you allow it. The
tokenizer needs no model code, but `AutoTokenizer` reads the model's config first and, unless allowed too, asks
whether to run its code:

```python
from transformers import {model_class}, AutoTokenizer

model = {model_class}.from_pretrained("{name}", trust_remote_code=True)
tokenizer = AutoTokenizer.from_pretrained("{name}", trust_remote_code=True)
```"""


PRETRAINING_SECTIONS = (
    Section(lambda record: record.name, _intro, level=1),
    Section("Results", _results),
    Section("Architecture", _architecture),
    Section("Training", _training),
    CONFIGURATION,
    Section("How to use", _usage),
)
