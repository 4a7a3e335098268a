"""Fine-tuning and composition result cards: one pretrained base fine-tuned on several real tasks fully, with LoRA,
with a bottleneck adapter, and, as the baseline that shows what pretraining is worth, fully from random weights
(same architecture and tokenizer); then, per target task, the tasks' adapters (bottleneck or LoRA) composed by
uniform averaging, a learned soft router, a learned hard router and AdapterFusion. Rebuilt from the run folders: no
number in a card is typed by hand.

    # 1. The runs, each recorded like a pretraining run (command, machine, load); a finished run is kept, not redone.
    python model_cards/generate_finetune_results.py run runs/results/finetune-bert-small \
        --base runs/results/bert-small-mlm-default-corpus --tasks sst2 rte conll2003 squad

    # 2. The compositions of the bottleneck adapters of those tasks, for each target task (a finished run is kept).
    #    Fusion attends over each adapted module's output: on a bottleneck's down_proj that is d wide, as in
    #    AdapterFusion; on LoRA's fused qkv_proj it is 3d wide and fusion's query/key/value cost 9 times as much.
    python model_cards/generate_finetune_results.py compose runs/results/finetune-bert-small \
        --base runs/results/bert-small-mlm-default-corpus --sources sst2 rte conll2003 --targets rte sst2

    # 3. The card: README.md + results.json (+ each run's training loss curve).
    python model_cards/generate_finetune_results.py card runs/results/finetune-bert-small \
        model_cards/results/finetune-bert-small

One task can also run with its own config file and run length, e.g. the Transformer from random weights, a preset as
the base; `card --compare` then sets it against another card's results on the same task:

    python model_cards/generate_finetune_results.py run runs/results/transformer-small-multi30k \
        --base transformer-small --methods scratch --tasks multi30k \
        --config recipes/configs/finetune/multi30k-transformer.yaml --length='--max_steps 500 --warmup_steps 100' \
        --threads 1
    python model_cards/generate_finetune_results.py card runs/results/transformer-small-multi30k \
        model_cards/results/transformer-small-multi30k --compare model_cards/results/finetune-t5-small

On a GPU, in calls of limited length (a lent device's 10 minutes): `--device cuda` trains every run there (the card
names the device), `--save_every N` checkpoints each run, and `--max_minutes M` stops the invocation after M minutes,
terminating a run still going (its checkpoints kept). The same command again keeps every finished run (its record
says the recipe exited with 0: `recording.run_complete`), continues a stopped one from its latest checkpoint (exactly:
the recipe's `--resume`) and runs the rest; it exits with 75 while runs are left, 0 once all are done:

    minilm=$(python -c 'from hfzoo.convert import minilm_model_path; print(minilm_model_path())')
    until python model_cards/generate_finetune_results.py run runs/results/finetune-minilm-l6-cuda --device cuda \
        --base "$minilm" --import_native --save_every 200 --max_minutes 9; do [ $? = 75 ] || break; done

`--native` adds one run of a native transformers model (`BertForSequenceClassification` of the base's shape, random
weights, the base's tokenizer) on the first task, through the same recipe, to show the recipe is not zoo-only.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import shutil
import sys
from pathlib import Path
from typing import Any

from finetune_targets import ADAPTERS, FLOORS, length_targets_section, targets_section
from grid_runs import Execution, add_execution_flags, execution_of, exit_code, native_checkpoint, run_once
from recording import REPO_ROOT, RUN_RECORD, run_complete, run_metrics, shown

from hfzoo.card_writing import (
    CARD, FINETUNE_METRICS, LOSS_CURVE, RunRecord, Section, markdown_table, model_card_data, render_card,
)  # fmt: skip
from hfzoo.core.files import write_atomic

RECIPE = "recipes/finetune.py"
COMPOSE_RECIPE = "recipes/compose.py"
# Task -> (the recipe's config file, the run length used for the reported results: the longest that let the grid's
# fine-tuning runs of SST-2, CoNLL-2003 and RTE take about 75 minutes on 2 CPU cores, two runs at a time (2.4 hours of
# run time); SQuAD's is the short one of the first card. The config files hold the longer, paper-like settings).
TASKS = {
    "sst2": ("recipes/configs/finetune/sst2.yaml",
             ["--max_train_samples", "40000", "--num_epochs", "1", "--per_device_batch_size", "32"]),
    "rte": ("recipes/configs/finetune/rte.yaml", ["--max_length", "128", "--num_epochs", "6"]),
    "conll2003": ("recipes/configs/finetune/conll2003.yaml", ["--num_epochs", "2"]),
    "squad": ("recipes/configs/finetune/squad.yaml",
              ["--max_length", "256", "--doc_stride", "64", "--max_steps", "120", "--max_eval_samples", "600"]),
    "multi30k": ("recipes/configs/finetune/multi30k.yaml",
                 ["--max_steps", "1000", "--per_device_batch_size", "16", "--learning_rate", "5e-4", "--num_beams", "1",
                  "--max_eval_samples", "500"]),
}  # fmt: skip
METHODS = {
    "full": ["--method", "full"],
    "lora": ["--method", "lora"],
    "bottleneck": ["--method", "bottleneck"],
    # The two placements of Houlsby et al. (2019: after attention and feed-forward) and Pfeiffer et al. (2021: after
    # feed-forward only), as separate methods; "bottleneck" is the recipe's default placement (Pfeiffer's).
    "bottleneck-houlsby": ["--method", "bottleneck", "--method_options.variant", "houlsby"],
    "bottleneck-pfeiffer": ["--method", "bottleneck", "--method_options.variant", "pfeiffer"],
    "scratch": ["--method", "full", "--from_scratch", "true"],
}
NATIVE = "native-bert-scratch"
IMPORT_NATIVE = ["--import_native", "true"]  # a native transformers base, imported into hfzoo's model by the recipe
COMPOSITIONS = ("average", "soft", "hard", "fusion")  # run folders <target>-compose-<composition>
PRIMARY = {"sequence-classification": "accuracy", "token-classification": "f1", "question-answering": "f1",
           "seq2seq": "bleu"}  # fmt: skip


# ------------------------------------------------------------------------------------------------ run
def run_grid(
    runs_dir: Path,
    base: Path,
    tasks: list[str],
    methods: list[str],
    native: bool,
    settings: dict[str, tuple[str, list[str]]] | None = None,
    env: dict[str, str] | None = None,
    import_native: bool = False,
    execution: Execution | None = None,
) -> int:
    """Every task x method into `runs_dir/<task>-<method>`; returns the number of failed runs. `settings`: (config
    file, run length) per task instead of `TASKS`'; `env`: environment variables of every run (in its command);
    `import_native`: `base` is a native transformers checkpoint that each run imports into hfzoo's model;
    `execution`: device, checkpoints and time budget (default: CPU, none, none)."""
    imported = IMPORT_NATIVE if import_native else []
    jobs = [(task, method, METHODS[method] + imported, base) for task in tasks for method in methods]
    if native:
        jobs.append((tasks[0], NATIVE, METHODS["full"], native_checkpoint(base, runs_dir / "native-bert-checkpoint")))
    settings = {**TASKS, **(settings or {})}
    return sum(run_once(runs_dir / f"{task}-{method}", RECIPE, model, method_args, settings[task], env,
                        execution) for task, method, method_args, model in jobs)  # fmt: skip


def run_compositions(
    runs_dir: Path,
    base: Path,
    sources: list[str],
    targets: list[str],
    kind: str,
    import_native: bool = False,
    settings: dict[str, tuple[str, list[str]]] | None = None,
    env: dict[str, str] | None = None,
    compositions: tuple[str, ...] = COMPOSITIONS,
    execution: Execution | None = None,
) -> int:
    """For each target task, the `kind` adapters of `sources` (from `run`) composed each of `compositions`' ways, with
    a fresh head trained on the target with the task's data and run length (or `settings`', as in `run_grid`);
    returns the number of failed runs. The uniform average is its own run, the baseline every learned composition
    is compared with."""
    adapters = ",".join(f"{task}={shown(str(runs_dir / f'{task}-{kind}'))}" for task in sources)
    settings = {**TASKS, **(settings or {})}
    return sum(
        run_once(runs_dir / f"{target}-compose-{composition}", COMPOSE_RECIPE, base,
                 ["--adapters", adapters, "--strategy", composition, "--baseline", "false",
                  *(IMPORT_NATIVE if import_native else [])], settings[target], env, execution)
        for target in targets for composition in compositions
    )  # fmt: skip


# ------------------------------------------------------------------------------------------------ card
def baselines(run_dir: Path) -> dict[str, float | None]:
    """The floors a fine-tuned model must clear, on the run's own validation examples (`hfzoo.tasks.baselines`):
    the most frequent training label's accuracy (classification), CoNLL-2003's baseline of entities memorized from
    the training data (token classification), the context sentence that shares the most words with the question
    (extractive QA), and for translation the BLEU of copying the source sentence unchanged."""
    from hfzoo.metrics import load_metric
    from hfzoo.core.recipe_config import CONFIG_FILE, from_dict, load_yaml
    from hfzoo.commands.finetune import FinetuneConfig
    from hfzoo.tasks import TASK_CLASSES, load_examples
    from hfzoo.tasks.baselines import best_overlap_sentence, majority_class_accuracy, memorized_entities

    config = from_dict(FinetuneConfig, load_yaml(run_dir / CONFIG_FILE)).data
    task = TASK_CLASSES[config.task](config)
    train, validation = load_examples(task, config)
    if config.task == "token-classification":
        return {"memorized_entities_f1": memorized_entities(train, validation)["f1"]}
    if config.task == "question-answering":
        return {"best_overlap_sentence_f1": best_overlap_sentence(validation)["f1"]}
    if config.task != "seq2seq":
        return {"majority_class_accuracy": majority_class_accuracy(train, validation)}
    copied = load_metric("sacrebleu").compute(
        predictions=[e.source for e in validation], references=[[e.target] for e in validation]
    )
    return {"copy_source_bleu": copied["score"]}


def collect(runs_dir: Path, compare: Path | None = None) -> dict[str, Any]:
    """results.json: per task, each method's metrics, parameters, steps and wall time (and training loss curve), the
    baselines; with `compare` (another card's folder), that card's results on the same tasks."""
    tasks: dict[str, Any] = {}
    devices: dict[str, None] = {}
    for run_dir in sorted(folder for folder in runs_dir.iterdir() if run_complete(folder)):
        task, _, method = run_dir.name.partition("-")
        metrics = run_metrics(run_dir)
        record = json.loads((run_dir / RUN_RECORD).read_text())
        loads = [sample[1] for sample in record["load_average_samples"]]
        if "device" in record:
            devices[record["device"]] = None
        entry = tasks.setdefault(task, {"task": metrics["task"], "methods": {}})
        entry["primary"] = PRIMARY[metrics["task"]]
        entry["methods"][method] = {
            **{k: v for k, v in metrics.items() if k not in ("model_kwargs",)},
            "wall_s": record["process_wall_s"],
            "load_average_1min_mean": sum(loads) / len(loads),
            "command": record["command"],
            "commit": record["git"]["commit"],
            **({"loss_plot": f"{run_dir.name}-loss.png"} if (run_dir / LOSS_CURVE).is_file() else {}),
        }
        if "baselines" not in entry and not method.startswith("compose-"):  # a fine-tuning config
            entry["baselines"] = baselines(run_dir)
    machine = json.loads(next(runs_dir.glob(f"*/{RUN_RECORD}")).read_text())["machine"]
    device = {"device": ", ".join(devices)} if devices else {}  # older records name none: CPU runs
    results = {"runs_dir": shown(str(runs_dir)), "machine": machine, **device, "tasks": tasks}
    if compare is not None:
        other = json.loads((compare / RESULTS).read_text())["tasks"]
        results["compare"] = {
            "card": shown(str(compare)),
            "tasks": {task: {method: {k: v for k, v in found.items() if k in (other[task]["primary"], "steps", "model")}
                             for method, found in other[task]["methods"].items()}
                      for task in tasks if task in other},
        }  # fmt: skip
    return results


def verdicts(entry: dict[str, Any]) -> list[str]:
    """The two claims of the pretrain/finetune paradigm, stated from the numbers (or refuted by them)."""
    methods, key = entry["methods"], entry["primary"]
    lines = []
    if "full" in methods and "scratch" in methods:
        gain = methods["full"][key] - methods["scratch"][key]
        lines.append(f"pretraining {'helps' if gain > 0 else 'does not help'}: full fine-tuning of the pretrained "
                     f"base {methods['full'][key]:.4f} vs the same architecture from random weights "
                     f"{methods['scratch'][key]:.4f} {key} ({gain:+.4f}{_in_examples(gain, key, methods['full'])})")
    for adapter in ADAPTERS:
        if adapter in methods and "full" in methods:
            a, f = methods[adapter], methods["full"]
            lines.append(f"{adapter} reaches {a[key]:.4f} {key} ({a[key] - f[key]:+.4f} vs full fine-tuning) training "
                         f"{100 * a['trainable_fraction']:.2f}% of the parameters")  # fmt: skip
    return lines


def comparisons(name: str, entry: dict[str, Any], compare: dict[str, Any] | None) -> list[str]:
    """Each run of this card against each result of the compared card on the same task."""
    if compare is None or name not in compare["tasks"]:
        return []
    key, lines = entry["primary"], []
    for method, run in entry["methods"].items():
        for other, found in compare["tasks"][name].items():
            gain = run[key] - found[key]
            lines.append(f"{method} {run[key]:.4f} {key} vs {other} of card `{Path(compare['card']).name}` "
                         f"(`{Path(found['model']).name}`, {found['steps']} steps) {found[key]:.4f}: {gain:+.4f}")
    return lines


def _in_examples(gain: float, key: str, run: dict[str, Any]) -> str:
    """An accuracy difference as a count of validation examples, to judge it against chance."""
    return f", {round(gain * run['eval_examples']):+d} of {run['eval_examples']} examples" if key == "accuracy" else ""


def composition_verdicts(entry: dict[str, Any]) -> list[str]:
    """Is a learned composition worth having? Only if it beats the uniform average of the same adapters."""
    methods, key = entry["methods"], entry["primary"]
    average = methods.get("compose-average")
    lines = []
    for composition in COMPOSITIONS[1:]:
        found = methods.get(f"compose-{composition}")
        if found and average:
            gain = found[key] - average[key]
            lines.append(f"{composition} {'beats' if gain > 0 else 'does not beat'} the uniform average of the same "
                         f"adapters: {found[key]:.4f} vs {average[key]:.4f} {key} "
                         f"({gain:+.4f}{_in_examples(gain, key, found)})")  # fmt: skip
    return lines


def _rows(entry: dict[str, Any], names: list[str], metric_keys: list[str]) -> list[list[Any]]:
    rows = []
    for name in [n for n in names if n in entry["methods"]]:
        m = entry["methods"][name]
        rows.append([f"**{name}**" if name == "full" else name, *(f"{m[k]:.4f}" for k in metric_keys),
                     f"{m['trainable_parameters']:,} ({100 * m['trainable_fraction']:.2f}%)", m["steps"],
                     f"{m['epochs']}", f"{m['wall_s']:.0f} s", f"{m['load_average_1min_mean']:.1f}"])  # fmt: skip
    for field, (label, metric) in FLOORS.items():
        if entry["baselines"].get(field) is not None:
            cells = [f"{entry['baselines'][field]:.4f}" if key == metric else "-" for key in metric_keys]
            rows.append([label, *cells, "0", "-", "-", "-", "-"])
    return rows




RESULTS = "results.json"
FINETUNED = ["full", *ADAPTERS, "scratch", NATIVE]
COMPOSED = [*ADAPTERS, *(f"compose-{c}" for c in COMPOSITIONS), "full"]
HEADERS = ["trainable parameters", "steps", "epochs", "wall time", "load"]
SCRATCH_INTRO = Section(
    "Results from random weights",
    "A model trained from random weights by `recipes/finetune.py` (the architecture of a preset or checkpoint; the "
    "tokenizer trained on the task's training data where the command says `--train_tokenizer true`), against the "
    "task's floor and, where given, the results of another card on the same task and validation examples. Generated "
    "by `model_cards/generate_finetune_results.py` from the run folders.",
    level=1,
)
INTRO = Section(
    "Fine-tuning and composition results",
    "One pretrained base fine-tuned on real tasks by `recipes/finetune.py`, each with the same data, steps and seed "
    "per task: full fine-tuning, a LoRA adapter, a bottleneck adapter (both with the task head trained and saved "
    "beside them), and full fine-tuning of the same architecture from random weights. Then, where run, the tasks' "
    "adapters composed for a target task by `recipes/compose.py` (adapters frozen, a fresh head trained with the "
    "composition). Generated by `model_cards/generate_finetune_results.py` from the run folders.",
    level=1,
)


def task_section(name: str, entry: dict[str, Any], compare: dict[str, Any] | None = None) -> Section:
    """One task: the fine-tuning methods against the floors, the verdicts, the comparison with another card, the
    training loss curves, the compositions if run, the commands."""
    methods, key = entry["methods"], entry["primary"]
    metric_keys = [k for k in FINETUNE_METRICS if k in next(iter(methods.values()))]
    first = next(iter(methods.values()))
    base = "Architecture (random weights)" if set(methods) == {"scratch"} else "Base"
    imported = first.get("imported_from")
    source = (f"imported from `{imported}` (a native transformers checkpoint, imported into hfzoo's model by each run: "
              "`--import_native true`)" if imported else f"`{first['model']}`")  # fmt: skip
    text = (f"{base}: {source}; {first['train_examples']:,} training examples, {first['eval_examples']:,} validation "
            "examples.\n\n")
    text += markdown_table(["method", *metric_keys, *HEADERS], _rows(entry, FINETUNED, metric_keys))
    text += "\n\n" + "\n".join(f"- {line}." for line in verdicts(entry) + comparisons(name, entry, compare))
    text += "".join(f"\n\n![training loss of {m}]({run['loss_plot']})" for m, run in methods.items()
                    if "loss_plot" in run)  # fmt: skip
    if any(m.startswith("compose-") for m in methods):
        adapters = methods["compose-average"]["composition"]["adapters"]
        sources = ", ".join(a["name"] for a in adapters)
        text += (f"\n\n### Composing the {adapters[0]['kind']} adapters of {sources} for {name}\n\n"
                 + markdown_table(["method", *metric_keys, *HEADERS], _rows(entry, COMPOSED, metric_keys))
                 + "\n\n" + "\n".join(f"- {line}." for line in composition_verdicts(entry)))  # fmt: skip
    text += "\n\nCommands (`python`: the virtualenv's):\n\n```bash\n" + "\n".join(
        methods[m]["command"] for m in dict.fromkeys(FINETUNED + COMPOSED) if m in methods) + "\n```"  # fmt: skip
    return Section(f"{name} ({entry['task']}, primary metric: {key})", text)


def render(results: dict[str, Any], card_command: str) -> str:
    """The card's Markdown: one section per task, then the machine the runs shared."""
    machine = results["machine"]
    machine_text = (
        (f"Device: {results['device']}.\n\n" if "device" in results else "") +
        f"{machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB; Python {machine['python']}, torch "
        f"{machine['torch']}. `load` is the mean 1-minute load average during each run ({machine['cores']} cores: "
        f"above {machine['cores']}, the run shared the CPU and its wall time is a ceiling).\n\nThis card:\n\n"
        f"```bash\n{card_command}\n```"
    )
    scratch_only = all(set(entry["methods"]) == {"scratch"} for entry in results["tasks"].values())
    sections = [SCRATCH_INTRO if scratch_only else INTRO,
                *([targets_section(results["tasks"]), length_targets_section(results["tasks"])]
                  if results.get("targets") else []),
                *(task_section(name, entry, results.get("compare")) for name, entry in results["tasks"].items()),
                Section("Machine", machine_text)]  # fmt: skip
    metadata = model_card_data(None, ["hfzoo", "fine-tuning", "adapters", "results"])
    return render_card(RunRecord("finetune-results", {}, summary=results), sections, metadata)


def card_command(runs_dir: str, card_dir: Path, compare: str | None = None, targets: bool = False) -> str:
    """The command that regenerates the card in `card_dir` from the run folders in `runs_dir` (and the card it is
    compared with, and whether it states issue 16's targets)."""
    command = ["python", "model_cards/generate_finetune_results.py", "card", runs_dir, shown(str(card_dir))]
    return shlex.join(command + (["--compare", compare] if compare else []) + (["--targets"] if targets else []))


def card(runs_dir: Path, card_dir: Path, compare: Path | None = None, targets: bool = False) -> Path:
    """Write README.md and results.json (and each run's training loss curve) for the finished run folders in
    `runs_dir` into `card_dir`; `compare`: another card's folder whose results on the same tasks the card quotes;
    `targets`: the card opens with issue 16's targets as measured verdicts."""
    results = collect(runs_dir, compare)
    if targets:
        results["targets"] = True
    card_dir.mkdir(parents=True, exist_ok=True)
    for entry in results["tasks"].values():
        for run in entry["methods"].values():
            if "loss_plot" in run:
                shutil.copyfile(runs_dir / run["loss_plot"].removesuffix("-loss.png") / LOSS_CURVE,
                                card_dir / run["loss_plot"])  # fmt: skip
    write_atomic(card_dir / RESULTS, json.dumps(results, indent=1) + "\n")
    command = card_command(results["runs_dir"], card_dir, results.get("compare", {}).get("card"), targets)
    return write_atomic(card_dir / CARD, render(results, command))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="fine-tune the base on each task with each method, recording each run")
    run.add_argument("runs_dir", type=Path)
    run.add_argument("--base", type=Path, required=True,
                     help="the pretrained checkpoint folder (with --methods scratch only: a preset's name)")
    run.add_argument("--tasks", nargs="+", default=list(TASKS), choices=list(TASKS))
    run.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    run.add_argument("--native", action="store_true", help="also a native BERT of the base's shape on the first task")
    run.add_argument("--config", help="one task only: the recipe's config file instead of the task's")
    run.add_argument("--length", help="one task only: the run length's flags instead of the task's, in one string "
                     "(--length='--max_steps 500')")
    run.add_argument("--import_native", action="store_true", help="--base is a native transformers checkpoint "
                     "(e.g. hfzoo.convert.minilm_model_path()): each run imports it into hfzoo's model")
    run.add_argument("--threads", type=int, help="OMP_NUM_THREADS of each run (in its command): on a shared CPU, 1 "
                     "thread can be faster than 2 that wait for each other")
    add_execution_flags(run)
    combine = commands.add_parser("compose", help="compose the sources' LoRA adapters for each target task")
    combine.add_argument("runs_dir", type=Path)
    combine.add_argument("--base", type=Path, required=True, help="the pretrained checkpoint folder")
    combine.add_argument("--sources", nargs="+", required=True, choices=list(TASKS))
    combine.add_argument("--targets", nargs="+", required=True, choices=list(TASKS))
    combine.add_argument("--kind", default="bottleneck", choices=ADAPTERS, help="which adapters")
    combine.add_argument("--import_native", action="store_true", help="--base is a native transformers checkpoint")
    combine.add_argument("--compositions", nargs="+", default=list(COMPOSITIONS), choices=COMPOSITIONS)
    combine.add_argument("--length", help="one target only: the run length's flags instead of the task's")
    combine.add_argument("--threads", type=int, help="OMP_NUM_THREADS of each run (in its command)")
    add_execution_flags(combine)
    make = commands.add_parser("card", help="README.md and results.json from the finished run folders")
    make.add_argument("runs_dir", type=Path)
    make.add_argument("card_dir", type=Path)
    make.add_argument("--compare", type=Path, help="another results card's folder to set this one against")
    make.add_argument("--targets", action="store_true", help="state issue 16's targets (pretraining, adapters, "
                      "fusion) as measured verdicts")
    args = parser.parse_args(argv)
    runs_dir = args.runs_dir.resolve()
    os.chdir(REPO_ROOT)  # the recipe's config files and data paths are relative to the repository root
    if args.command in ("run", "compose"):
        tasks, config = (args.tasks, args.config) if args.command == "run" else (args.targets, None)
        settings = None
        if config or args.length:
            if len(tasks) != 1:
                parser.error("--config and --length set one task's run: give one --tasks (compose: --targets)")
            config_file, length = TASKS[tasks[0]]
            length = shlex.split(args.length) if args.length else length
            settings = {tasks[0]: (config or config_file, length)}
        env = {"OMP_NUM_THREADS": str(args.threads)} if args.threads else None
        execution = execution_of(args, runs_dir)
        if args.command == "run":
            failed = run_grid(runs_dir, args.base.resolve(), args.tasks, args.methods, args.native, settings, env,
                              args.import_native, execution)  # fmt: skip
        else:
            failed = run_compositions(runs_dir, args.base.resolve(), args.sources, args.targets, args.kind,
                                      args.import_native, settings, env, tuple(args.compositions), execution)
        sys.exit(exit_code(failed, execution))
    print(card(runs_dir, args.card_dir.resolve(), args.compare.resolve() if args.compare else None, args.targets))


if __name__ == "__main__":
    main()
