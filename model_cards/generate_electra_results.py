"""ELECTRA against masked-LM pretraining for the same steps: each pretrained on the same corpus with the same preset,
data, batch, schedule and seed, then each fine-tuned fully on SST-2 with the same steps and seed. Rebuilt from the
run folders: no number in the card is typed by hand.

    # 1. The four runs, each recorded (command, machine, load); a finished run is kept, not redone. Everything after
    #    `--` goes to both pretraining runs (`--objective` is added: mlm, then electra).
    python model_cards/generate_electra_results.py run runs/results/electra-vs-mlm-bert-tiny --finetune-steps 150 \
        -- --preset bert-tiny --max_steps 200 --block_size 128 --per_device_batch_size 16

    # 2. The card: README.md + results.json.
    python model_cards/generate_electra_results.py card runs/results/electra-vs-mlm-bert-tiny \
        model_cards/results/electra-vs-mlm-bert-tiny

The pretraining runs are `pretrain-mlm` and `pretrain-electra` in the runs folder (each also gets the unigram
baseline of `generate_results.py`); the fine-tuning runs `sst2-mlm` and `sst2-electra` (`recipes/finetune.py` with
recipes/configs/finetune/sst2.yaml, `--method full`). ELECTRA keeps its discriminator, a normal encoder checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from generate_finetune_results import RECIPE, TASKS, baselines, run_once
from generate_results import record, summarize
from recording import REPO_ROOT, RUN_RECORD, run_metrics, shown

from hfzoo.cards import CARD, RunRecord, Section, markdown_table, model_card_data, render_card
from hfzoo.files import write_atomic

OBJECTIVES = ("mlm", "electra")
RESULTS = "results.json"


def run(runs_dir: Path, recipe_args: list[str], finetune_length: list[str]) -> int:
    """Pretrain with each objective (`recipe_args`), then fine-tune each on SST-2 (`finetune_length`: the fine-tuning
    recipe's run-length arguments); returns the number of failed runs."""
    failed = 0
    for objective in OBJECTIVES:
        pretrained = runs_dir / f"pretrain-{objective}"
        if not (pretrained / "model.safetensors").is_file():
            print(f"{pretrained}: pretraining", flush=True)
            if record(pretrained, [*recipe_args, "--objective", objective]) != 0:
                failed += 1
                continue
        failed += run_once(
            runs_dir / f"sst2-{objective}", RECIPE, pretrained, ["--method", "full"],
            (TASKS["sst2"][0], finetune_length),
        )
    return failed


def _load(run_dir: Path) -> dict[str, float]:
    loads = [sample[1] for sample in json.loads((run_dir / RUN_RECORD).read_text())["load_average_samples"]]
    return {"mean": statistics.fmean(loads), "max": max(loads)}


def collect(runs_dir: Path, card_command: str) -> dict[str, Any]:
    """results.json: per objective, the pretraining summary (with its last evaluation) and the SST-2 fine-tuning."""
    from hfzoo.training.logging import read_log

    results: dict[str, Any] = {"runs_dir": shown(str(runs_dir)), "objectives": {}}
    for objective in OBJECTIVES:
        pretrained, finetuned = runs_dir / f"pretrain-{objective}", runs_dir / f"sst2-{objective}"
        summary = summarize(pretrained, card_command)
        summary["last_evaluation"] = [r for r in read_log(pretrained) if r["event"] == "eval"][-1]
        summary["load"] = _load(pretrained)
        finetune_record = json.loads((finetuned / RUN_RECORD).read_text())
        metrics = run_metrics(finetuned)
        results["objectives"][objective] = {
            "pretraining": summary,
            "sst2": {**{k: v for k, v in metrics.items() if k != "model_kwargs"},
                     "wall_s": finetune_record["process_wall_s"], "load": _load(finetuned),
                     "command": finetune_record["command"], "git": finetune_record["git"]},  # fmt: skip
        }
    results["sst2_majority_class_accuracy"] = baselines(runs_dir / "sst2-mlm")["majority_class_accuracy"]
    results["machine"] = results["objectives"]["mlm"]["pretraining"]["machine"]
    return results


def _pretraining_table(results: dict[str, Any]) -> str:
    rows = []
    for objective, entry in results["objectives"].items():
        s, t, last = entry["pretraining"], entry["pretraining"]["training"], entry["pretraining"]["last_evaluation"]
        discriminator = last.get("eval_discriminator_loss")
        rows.append([
            objective, f"{s['parameters']:,}", t["steps"], f"{t['tokens_seen']:,}", f"{t['loop_wall_s']:.0f} s",
            f"{t['process_wall_s']:.0f} s", f"{t['tokens_per_s_median']:,.0f}",
            f"{s['final']['perplexity']:.1f}", f"{s['baseline']['unigram_perplexity']:.1f}",
            "-" if discriminator is None else f"{discriminator:.4f}", f"{entry['pretraining']['load']['mean']:.1f}",
        ])  # fmt: skip
    headers = ["objective", "parameters trained", "steps", "tokens seen", "loop wall time", "process wall time",
               "tokens/s (median)", "masked-LM perplexity", "unigram perplexity", "discriminator loss", "load"]
    return markdown_table(headers, rows)


def _finetuning_table(results: dict[str, Any]) -> str:
    rows = [[f"{objective} base", f"{e['sst2']['accuracy']:.4f}", f"{e['sst2']['f1']:.4f}",
             f"{e['sst2']['matthews_correlation']:.4f}", e["sst2"]["steps"], f"{e['sst2']['epochs']}",
             f"{e['sst2']['wall_s']:.0f} s", f"{e['sst2']['load']['mean']:.1f}"]
            for objective, e in results["objectives"].items()]  # fmt: skip
    rows.append(["majority class", f"{results['sst2_majority_class_accuracy']:.4f}", "-", "-", "-", "-", "-", "-"])
    return markdown_table(["fine-tuned from", "accuracy", "f1", "matthews_correlation", "steps", "epochs",
                           "wall time", "load"], rows)  # fmt: skip


def _verdicts(results: dict[str, Any]) -> str:
    mlm, electra = results["objectives"]["mlm"], results["objectives"]["electra"]
    gain = electra["sst2"]["accuracy"] - mlm["sst2"]["accuracy"]
    examples = electra["sst2"]["eval_examples"]
    majority = results["sst2_majority_class_accuracy"]
    wall = electra["pretraining"]["training"]["loop_wall_s"] / mlm["pretraining"]["training"]["loop_wall_s"]
    lines = [
        f"ELECTRA {'beats' if gain > 0 else 'does not beat'} masked-LM pretraining on SST-2 after the same "
        f"pretraining steps: {electra['sst2']['accuracy']:.4f} vs {mlm['sst2']['accuracy']:.4f} accuracy "
        f"({gain:+.4f}, {round(gain * examples):+d} of {examples} validation sentences)",
        *(f"the {objective} base {'beats' if e['sst2']['accuracy'] > majority else 'does NOT beat'} the majority "
          f"class ({e['sst2']['accuracy']:.4f} vs {majority:.4f})" for objective, e in results["objectives"].items()),
        f"the same steps took ELECTRA {wall:.2f}x the masked LM's training-loop wall time (its generator's and "
        "discriminator's forward and backward against the masked LM's; the machine's load differed between the "
        "runs, see the table)",
    ]  # fmt: skip
    return "\n".join(f"- {line}." for line in lines)


def render(results: dict[str, Any], card_command: str) -> str:
    mlm = results["objectives"]["mlm"]["pretraining"]
    electra_options = results["objectives"]["electra"]["pretraining"]["config"]["objective_options"]
    intro = (
        f"`{mlm['preset']}` pretrained from scratch on {mlm['data']['name']} twice by `recipes/pretrain.py`, with the "
        "same data, batch, learning-rate schedule, steps and seed: once as a masked LM (`--objective mlm`), once as "
        "ELECTRA's discriminator (`--objective electra`: a generator of 1/4 the width, unless "
        f"`objective_options` say otherwise (here {electra_options or 'the defaults'}), fills 15% masked tokens by "
        "sampling, the discriminator labels every token replaced or original; loss = generator MLM loss + 50 x "
        "discriminator loss). Each kept model (the masked LM's encoder; ELECTRA's discriminator) is then fine-tuned "
        "fully on SST-2 by `recipes/finetune.py` with the same steps and seed. Generated by "
        "`model_cards/generate_electra_results.py` from the run folders."
    )
    perplexity_note = (
        "`masked-LM perplexity` is the masked LM's own for `mlm` and ELECTRA's generator's for `electra` (a model "
        "of 1/4 the width, which is only the discriminator's teacher); both on the same validation masks, against the "
        "unigram baseline of those targets. `parameters trained` counts ELECTRA's generator too (the embeddings are "
        "shared); the kept discriminator has the masked LM's encoder size. `load` is the mean 1-minute load average "
        "during the run on 2 cores: above 2 the run shared the CPU and its wall time is a ceiling."
    )
    commands = "\n".join(
        [e["pretraining"]["commands"]["run"] for e in results["objectives"].values()]
        + [e["sst2"]["command"] for e in results["objectives"].values()]
    )
    machine = results["machine"]
    code = {f"{kind}-{objective}": git for objective, e in results["objectives"].items()
            for kind, git in (("pretrain", e["pretraining"]["machine"]["git"]), ("sst2", e["sst2"]["git"]))}
    rows = [[run, git["commit"][:12], ", ".join(git["uncommitted"]) or "none"] for run, git in code.items()]
    machine_text = (
        f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, {machine.get('memory_gib', '?')} GiB; Python "
        f"{machine.get('python', '?')}, torch {machine.get('torch', '?')}. The code each run ran:\n\n"
        + markdown_table(["run", "commit", "files under hfzoo/ and recipes/ uncommitted when it started"], rows)
    )
    sections = [
        Section("ELECTRA vs masked-LM pretraining, then SST-2", intro, level=1),
        Section("Verdict", _verdicts(results)),
        Section("Pretraining (same steps)", _pretraining_table(results) + "\n\n" + perplexity_note),
        Section("Fine-tuning on SST-2 (same steps and seed)", _finetuning_table(results)),
        Section("Commands", f"The runs, as recorded (`python`: the virtualenv's):\n\n```bash\n{commands}\n```\n\n"
                + (f"which `{shlex.join(results['command'])}` started.\n\n" if results["command"] else "")
                + f"This card:\n\n```bash\n{card_command}\n```"),
        Section("Machine", machine_text),
    ]  # fmt: skip
    metadata = model_card_data(None, ["hfzoo", mlm["preset"], "electra", "mlm", "pretraining", "results"])
    return render_card(RunRecord("electra-vs-mlm", {}, summary=results), sections, metadata)


def card_command(runs_dir: str, card_dir: Path) -> str:
    """The command that regenerates the card in `card_dir` from the run folders in `runs_dir`."""
    return shlex.join(["python", "model_cards/generate_electra_results.py", "card", runs_dir, shown(str(card_dir))])


def card(runs_dir: Path, card_dir: Path) -> Path:
    """Write README.md and results.json for the finished runs in `runs_dir` into `card_dir`."""
    command = card_command(shown(str(runs_dir)), card_dir)
    results = collect(runs_dir, command)
    started = runs_dir / "command.json"  # written by `run`
    results["command"] = json.loads(started.read_text()) if started.is_file() else None
    card_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(card_dir / RESULTS, json.dumps(results, indent=1) + "\n")
    return write_atomic(card_dir / CARD, render(results, command))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("run", help="pretrain with mlm and electra, fine-tune each on SST-2, recording each")
    runs.add_argument("runs_dir", type=Path)
    runs.add_argument("--finetune-steps", type=int, default=150)
    runs.add_argument("--finetune-batch-size", type=int, default=32)
    make = commands.add_parser("card", help="README.md and results.json from the finished run folders")
    make.add_argument("runs_dir", type=Path)
    make.add_argument("card_dir", type=Path)
    argv = sys.argv[1:] if argv is None else argv
    own, recipe_args = (argv[: argv.index("--")], argv[argv.index("--") + 1 :]) if "--" in argv else (argv, [])
    args = parser.parse_args(own)  # after --: both pretraining runs' arguments
    runs_dir = args.runs_dir.resolve()
    card_dir = args.card_dir.resolve() if args.command == "card" else None
    os.chdir(REPO_ROOT)  # the recipes' config files and data paths are relative to the repository root
    if args.command == "run":
        runs_dir.mkdir(parents=True, exist_ok=True)
        typed = ["python", "model_cards/generate_electra_results.py", *argv]
        (runs_dir / "command.json").write_text(json.dumps(typed))
        length = ["--max_steps", str(args.finetune_steps), "--per_device_batch_size", str(args.finetune_batch_size)]
        sys.exit(run(runs_dir, recipe_args, length))
    print(card(runs_dir, card_dir))


if __name__ == "__main__":
    main()
