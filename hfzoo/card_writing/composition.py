"""The composition card: the fine-tuning card's sections plus an account of the composition and its baselines
(a learned strategy is only worth having if it beats the uniform average of the same adapters), and a usage
section that rebuilds the composition with `load_composition` instead of loading one PEFT adapter."""

from __future__ import annotations

import json

from ..adapters import STRATEGIES
from .finetuning import PARAMETERS, RESULTS, TITLE, TRAINING, base_loading, reported_metrics
from .render import CONFIGURATION, RunRecord, Section, markdown_table, shown_recorded_path

BASELINE_NAMES = {"average": "uniform average of the same adapters, head trained", "majority_class": "majority class"}


def _composition(record: RunRecord) -> str:
    composition = record.summary["composition"]
    strategy = composition["strategy"]
    adapters = markdown_table(
        ("adapter", "kind", "rank / width", "modules", "folder"),
        [
            (a["name"], a["kind"], a["rank"], a["modules"], f"`{shown_recorded_path(a['folder'], record)}`")
            for a in composition["adapters"]
        ],
    )
    trained = ", ".join(f"`{m}`" for m in composition["trainable_modules"]) or "nothing else"
    options = {key: value for key, value in composition["options"].items() if key != "trainable_modules"}
    if STRATEGIES[strategy].learned:
        where = (
            f"{composition['learned_modules']} of the {composition['composed_modules']} adapted modules have "
            f"{strategy} layers, which learn how to weigh the adapters there and, where some adapter is absent, the "
            "base module's own output"
        )
    else:
        where = f"each of the {composition['composed_modules']} adapted modules adds its adapters' outputs, weighted"
    return (
        f"`{strategy}` over {len(composition['adapters'])} frozen adapters on the frozen base model "
        f"(options: `{json.dumps(options)}`): {where}. Trained beside them: {trained}.\n\n{adapters}"
    )


def _against_baselines(record: RunRecord) -> str:
    summary = record.summary
    strategy, metrics = summary["composition"]["strategy"], reported_metrics(summary)
    rows = [(f"{strategy} (this run)", *(f"{summary[k]:.4f}" for k in metrics), f"{summary['trainable_parameters']:,}")]
    for name, row in summary["baselines"].items():
        values = (f"{row[k]:.4f}" if k in row else "-" for k in metrics)
        rows.append((BASELINE_NAMES[name], *values, f"{row['trainable_parameters']:,}"))
    text = markdown_table(("", *metrics, "trainable parameters"), rows)
    if "average" in summary["baselines"] and metrics:
        primary = metrics[0]
        gain = summary[primary] - summary["baselines"]["average"][primary]
        verdict = "beats" if gain > 0 else "does not beat"
        text += f"\n\n`{strategy}` {verdict} the uniform average of the same adapters: {gain:+.4f} {primary}"
        if primary == "accuracy":  # how many examples that is, to judge it against chance
            text += f" ({round(gain * summary['eval_examples']):+d} of {summary['eval_examples']} examples)"
        text += "."
    reload = summary["reload_check"]
    return text + (
        f"\n\nReloaded with `load_composition` on a freshly loaded base model: parameters identical: "
        f"{reload['parameters_equal']}, all {summary['eval_examples']} validation predictions identical: "
        f"{reload['predictions_equal']}."
    )


def composition_sections(composition_dir: str) -> tuple[Section, ...]:
    """The card of a composition run whose `ComposedModel.save_pretrained` folder is `<output_dir>/<composition_dir>`:
    the fine-tuning sections, the composition's own before the training settings, and its usage."""

    def usage(record: RunRecord) -> str:
        imports, base = base_loading(record)
        return f"""```python
import hfzoo  # registers hfzoo's architectures and its bottleneck adapters
{imports}
from hfzoo.adapters import load_composition

{base}
model = load_composition(base, "{record.name}/{composition_dir}")  # routers or fusion, the head, a copy of each adapter
tokenizer = AutoTokenizer.from_pretrained("{record.name}")
```"""

    return (
        TITLE, RESULTS, PARAMETERS,
        Section("Composition", _composition),
        Section("Against the baselines", _against_baselines, level=3),
        TRAINING, CONFIGURATION,
        Section("How to use", usage),
    )  # fmt: skip
