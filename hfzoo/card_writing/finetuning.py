"""The fine-tuning card, from the run's metrics.json (the record's summary), log and config: the validation
metrics, how many parameters trained, the run, and how to reload the full model or the PEFT adapter.

A composition run's card is this card with the composition's sections added (`hfzoo.card_writing.composition`), which is
why the pieces are separate sections rather than one template.
"""

from __future__ import annotations

from pathlib import Path

from huggingface_hub import ModelCardData

from .render import (
    CONFIGURATION, LOCAL_DATA, LOSS_CURVE, RunRecord, Section, hub_id, markdown_table, model_card_data, shown_path,
    shown_recorded_path,
)  # fmt: skip

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


def reported_metrics(summary: dict) -> list[str]:
    """The `FINETUNE_METRICS` keys a run reported, in display order."""
    return [key for key in FINETUNE_METRICS if key in summary]


def task_data(record: RunRecord) -> str:
    """The task's data as the config names it: a Hub dataset or the training file (`shown_path`)."""
    return shown_path(record.config.get("dataset") or record.config.get("train_file"), record)


def library(summary: dict) -> str:
    """The library that loads the run folder: a composition's through `hfzoo.adapters.load_composition` (it is not
    one PEFT adapter), a single adapter through PEFT, a fully fine-tuned model through transformers."""
    if "composition" in summary:
        return "hfzoo"
    return "transformers" if summary["method"] == "full" else "peft"


def finetune_metadata(record: RunRecord) -> ModelCardData:
    """The library that loads the folder (`library`), the base model when it is on the Hub (none from scratch:
    only the architecture came from it), the data set when it is on the Hub, tags (task, method) and every reported
    validation metric as the model-index (on the Hub data set, or on `LOCAL_DATA` named as the card shows it)."""
    summary, dataset = record.summary, hub_id(record.config.get("dataset"))
    base_model = None if record.config.get("from_scratch") else hub_id(summary["model"])
    method = Path(summary["method"]).stem  # a PEFT config file (`--peft_config`) by its name, not its path
    return model_card_data(
        record.name, ["hfzoo", "fine-tuning", summary["task"], method],
        pipeline_tag=summary["pipeline_tag"], task_name=summary["task"],
        dataset=(dataset, dataset) if dataset else (LOCAL_DATA, task_data(record)),
        metrics=[(key, FINETUNE_METRICS[key], round(summary[key], 4)) for key in reported_metrics(summary)],
        library_name=library(summary), base_model=base_model, datasets=[dataset] if dataset else None,
    )  # fmt: skip


def _intro(record: RunRecord) -> str:
    s = record.summary
    imported = " (a native transformers checkpoint, imported into hfzoo)" if "imported_from" in s else ""
    return (
        f"`{shown_recorded_path(s['model'], record)}`{imported} fine-tuned for {s['task']} with hfzoo's fine-tuning "
        f"recipe (method: {s['method']}; {100 * s['trainable_fraction']:.3f}% of the parameters trained)."
    )


def base_loading(record: RunRecord) -> tuple[str, str]:
    """(the imports, the statement) that load the run's base model with its task head, as the run did: a native
    checkpoint imported into hfzoo (`--import_native`) is imported again with `from_native`."""
    s = record.summary
    kwargs = "".join(f", {key}={value!r}" for key, value in s["model_kwargs"].items())
    auto_class, path = s["auto_class"], shown_recorded_path(s["model"], record)
    imports = f"from transformers import {auto_class}, AutoTokenizer"
    if "imported_from" not in s:
        return imports, f'base = {auto_class}.from_pretrained("{path}"{kwargs})'
    load = f'base = from_native({auto_class}.from_pretrained("{path}"{kwargs}))  # imported, as in training'
    return f"{imports}\nfrom hfzoo.convert import from_native", load


def _results(record: RunRecord) -> str:
    s = record.summary
    rows = [(FINETUNE_METRICS[key], f"{s[key]:.4f}") for key in reported_metrics(s)]
    table = markdown_table(("metric", "validation"), rows)
    return f"On {s['eval_examples']} validation examples:\n\n{table}\n\n![loss curve]({LOSS_CURVE})"


def _parameters(record: RunRecord) -> str:
    s = record.summary
    rows = [
        ("method", s["method"]),
        ("trainable parameters", f"{s['trainable_parameters']:,}"),
        ("total parameters", f"{s['total_parameters']:,}"),
        ("trainable fraction", f"{100 * s['trainable_fraction']:.3f}%"),
    ]
    return markdown_table(("", "value"), rows)


def _training(record: RunRecord) -> str:
    s, train = record.summary, record.events("train")
    rows = [
        ("base model", f"`{shown_recorded_path(s['model'], record)}` ({s['family']})"),
        *([("imported from", f"`{shown_recorded_path(s['imported_from'], record)}`, a native transformers checkpoint, "
            "with `hfzoo.convert.from_native` (`--import_native true`)")] if "imported_from" in s else []),
        ("data", f"{task_data(record)}: {s['train_examples']} training, {s['eval_examples']} validation "
                 "examples"),
        ("optimizer steps", f"{s['steps']} ({s['epochs']} epochs)"),
        ("final training loss", f"{train[-1]['loss']:.4f}" if train else "not logged"),
    ]  # fmt: skip
    return markdown_table(("setting", "value"), rows)


def bottleneck_loading(name: str) -> str:
    """What a bottleneck adapter's card and its run's log say about loading it: PEFT has no such method."""
    return (f"{name} is a bottleneck adapter, a PEFT method hfzoo adds: PEFT alone cannot load it (KeyError: "
            f"'BOTTLENECK'). `import hfzoo` first registers it; then PeftModel.from_pretrained(base, \"{name}\") "
            "loads it as any adapter.")


def _usage(record: RunRecord) -> str:
    s, name = record.summary, record.name
    note = f"{bottleneck_loading(name)}\n\n" if s["method"] == "bottleneck" else ""
    auto_class = s["auto_class"]
    if s["method"] == "full":
        load = f'model = {auto_class}.from_pretrained("{name}")'
        imports = f"from transformers import {auto_class}, AutoTokenizer"
    else:  # the base with the same head shape, then the adapter (which restores the trained head)
        imports, base = base_loading(record)
        load = f'{base}\nmodel = PeftModel.from_pretrained(base, "{name}")'
        imports = f"from peft import PeftModel\n{imports}"
    return f"""{note}```python
import hfzoo  # registers hfzoo's architectures and its bottleneck adapters with transformers and PEFT
{imports}

{load}
tokenizer = AutoTokenizer.from_pretrained("{name}")
```"""


TITLE = Section(lambda record: record.name, _intro, level=1)
RESULTS = Section("Results", _results)
PARAMETERS = Section("Parameters", _parameters)
TRAINING = Section("Training", _training)
FINETUNE_SECTIONS = (TITLE, RESULTS, PARAMETERS, TRAINING, CONFIGURATION, Section("How to use", _usage))
