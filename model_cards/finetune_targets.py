"""The verdicts of the fine-tuning grid's card on the targets that issues 16 and 26 set for a real pretrained base,
each measured from the card's results (`generate_finetune_results.py` renders them)."""

from __future__ import annotations

from typing import Any

from hfzoo.card_writing import Section

ADAPTERS = ["lora", "bottleneck", "bottleneck-houlsby", "bottleneck-pfeiffer"]

# Baseline field -> (its row's label, the metric column it fills).
FLOORS = {
    "majority_class_accuracy": ("majority class", "accuracy"),
    "memorized_entities_f1": ("entities memorized from training (CoNLL-2003's baseline)", "f1"),
    "best_overlap_sentence_f1": ("the sentence sharing most words with the question", "f1"),
    "copy_source_bleu": ("copy the source", "bleu"),
}


# Tasks whose primary metric is reported in percent already (SQuAD's F1, BLEU); the others' are fractions.
PERCENT_METRICS = ("question-answering", "seq2seq")


def points(run: dict[str, Any], key: str) -> float:
    return run[key] if run["task"] in PERCENT_METRICS else 100 * run[key]


def targets_section(tasks: dict[str, Any]) -> Section:
    """Issue 16's targets for a real pretrained base, each a measured verdict: pretraining worth >= 5 points on every
    task; the best adapter within 1 point of full fine-tuning at <= 5% of the parameters on every task; fusion at
    least as good as the best single adapter and the uniform average on at least two tasks. Points: the task's
    primary metric in percent; a task without the runs a target needs says so."""
    pretrained, adapters, fusion = [], [], []
    for name, entry in tasks.items():
        methods, key = entry["methods"], entry["primary"]
        full, scratch = methods.get("full"), methods.get("scratch")
        if full and scratch:
            gain = points(full, key) - points(scratch, key)
            pretrained.append((gain >= 5, f"{name}: full {points(full, key):.2f} vs scratch "
                                          f"{points(scratch, key):.2f} ({gain:+.2f} points)"))  # fmt: skip
        else:
            pretrained.append((False, f"{name}: not run"))
        floor = next(((label, entry["baselines"][field]) for field, (label, metric) in FLOORS.items()
                      if metric == key and entry.get("baselines", {}).get(field) is not None), None)  # fmt: skip
        if full and floor is not None and full[key] <= floor[1]:  # the run length did not lift the model off the floor
            floor_points = points({**full, key: floor[1]}, key)
            pretrained[-1] = (pretrained[-1][0], f"{pretrained[-1][1]}, full fine-tuning no better than the task's "
                                                 f"floor ({floor[0]}) {floor_points:.2f}: this task's verdicts are at "
                                                 "the floor")  # fmt: skip
        single = {m: methods[m] for m in ADAPTERS if m in methods}
        if full and single:
            best = max(single, key=lambda m: single[m][key])
            gap = points(full, key) - points(single[best], key)
            fraction = 100 * single[best]["trainable_fraction"]
            adapters.append((gap <= 1 and fraction <= 5, f"{name}: best adapter {best} {points(single[best], key):.2f}"
                             f" vs full {points(full, key):.2f} ({-gap:+.2f} points) at {fraction:.2f}% trainable"))
        else:
            adapters.append((False, f"{name}: not run"))
        fused, average = methods.get("compose-fusion"), methods.get("compose-average")
        if fused and average and single:
            best = max(single, key=lambda m: single[m][key])
            met = fused[key] >= single[best][key] and fused[key] >= average[key]
            fusion.append((met, f"{name}: fusion {points(fused, key):.2f} vs best single adapter ({best}) "
                                f"{points(single[best], key):.2f} and uniform average {points(average, key):.2f}"))
        else:
            fusion.append((False, f"{name}: not run"))
    claims = [("Pretrained beats scratch by >= 5 points on every task", pretrained, len(tasks)),
              ("The best adapter is within 1 point of full fine-tuning at <= 5% trainable parameters on every task",
               adapters, len(tasks)),
              ("Fusion >= the best single adapter and >= the uniform average on at least two tasks", fusion, 2)]
    lines = []
    for claim, found, needed in claims:
        met = sum(ok for ok, _ in found)
        verdict = "**met**" if met >= needed else "**not met**"
        lines.append(f"- {claim}: {verdict} ({met} of {len(found)} tasks). " + "; ".join(t for _, t in found) + ".")
    return Section("Targets (issue 16), measured", "\n".join(lines))


# Issue 26's bars for full fine-tuning of the real base at real length: task -> (label, absolute bar in points, or
# the floor's baseline field and the margin above it in points).
LENGTH_TARGETS = {
    "sst2": ("SST-2 accuracy >= 88", 88.0, None),
    "conll2003": ("CoNLL-2003 F1 >= 85", 85.0, None),
    "squad": ("SQuAD F1 >= its floor (the sentence sharing most words with the question) + 20",
              20.0, "best_overlap_sentence_f1"),
    "rte": ("RTE accuracy >= its majority class + 5", 5.0, "majority_class_accuracy"),
}


def length_targets_section(tasks: dict[str, Any]) -> Section:
    """Issue 26's targets for full fine-tuning, each a measured verdict (or "not run" where the card has no such run):
    absolute bars on SST-2 and CoNLL-2003, bars above the task's floor on SQuAD and RTE."""
    lines = []
    for name, (label, bar, floor_field) in LENGTH_TARGETS.items():
        full = tasks.get(name, {}).get("methods", {}).get("full")
        if full is None:
            lines.append(f"- {label}: not run")
            continue
        key = tasks[name]["primary"]
        needed = bar + (points({**full, key: tasks[name]["baselines"][floor_field]}, key) if floor_field else 0.0)
        value = points(full, key)
        verdict = "**met**" if value >= needed else "**not met**"
        lines.append(f"- {label}: {verdict}: full fine-tuning {value:.2f} against {needed:.2f} ({value - needed:+.2f} "
                     f"points; {full['steps']} steps, {full['epochs']} epochs)")  # fmt: skip
    return Section("Targets (issue 26: real length), measured", "\n".join(lines))
