"""ELECTRA against masked-LM pretraining at equal compute: the same encoder preset pretrained from scratch on the same
corpus, data order, batch, schedule and seed, once as a masked LM and once as ELECTRA's discriminator, the masked LM
given as many more steps as ELECTRA's dearer step costs (`--mlm-steps`); then each, and the same encoder with random
weights, fine-tuned fully on SST-2 at each learning rate and seed. Rebuilt from the run folders: no number in the card
is typed by hand.

    # 1. The runs, each recorded (command, machine, load); a finished run is kept, not redone. Everything after `--`
    #    goes to both pretraining runs (`--objective` is added: mlm, then electra).
    python model_cards/generate_electra_results.py run runs/results/electra-vs-mlm-bert-tiny-sst2 --mlm-steps 4050 \
        --finetune-learning-rates 1e-4 3e-4 1e-3 --finetune-seeds 42 43 44 \
        -- --preset bert-tiny --dataset ../shared/data/sst2/train.tsv --text_column sentence --block_size 128 \
        --per_device_batch_size 32 --learning_rate 1e-3 --warmup_steps 200 --weight_decay 0.01 --adam_beta2 0.999 \
        --eval_every 500 --max_eval_samples 2000 --save_every 1000 --tensorboard false --log_every 20 --max_steps 3000

    # 2. The card: README.md + results.json.
    python model_cards/generate_electra_results.py card runs/results/electra-vs-mlm-bert-tiny-sst2 \
        model_cards/results/electra-vs-mlm-bert-tiny

The pretraining runs are `pretrain-mlm` and `pretrain-electra` in the runs folder (each also gets the unigram
baseline of `generate_results.py`); the fine-tuning runs `sst2-<base>-lr<rate>-seed<seed>` (`recipes/finetune.py`
with recipes/configs/finetune/sst2.yaml, `--method full`), where base `scratch` is the masked LM's config and
tokenizer with random weights (`--from_scratch true`): the floor that shows whether pretraining transferred at all.
ELECTRA keeps its discriminator, a normal encoder checkpoint.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import sys
from pathlib import Path
from typing import Any

from generate_finetune_results import RECIPE, TASKS, baselines, run_once
from generate_results import record, summarize
from recording import REPO_ROOT, RUN_RECORD, run_complete, run_metrics, shown

from hfzoo.card_writing import CARD, RunRecord, Section, markdown_table, model_card_data, render_card
from hfzoo.core.files import write_atomic

OBJECTIVES = ("mlm", "electra")
BASES = (*OBJECTIVES, "scratch")  # scratch: the masked LM's config and tokenizer, random weights
RESULTS = "results.json"
# One epoch of SST-2's 67,349 training phrases (the config file keeps the first 20,000).
FINETUNE_LENGTH = ["--max_train_samples", "null", "--num_epochs", "1", "--per_device_batch_size", "32"]


def finetune_dir(runs_dir: Path, base: str, learning_rate: str, seed: int) -> Path:
    return runs_dir / f"sst2-{base}-lr{learning_rate}-seed{seed}"


FINETUNE_RUN = re.compile(rf"sst2-(?P<base>{'|'.join(BASES)})-lr(?P<rate>.+)-seed(?P<seed>\d+)")  # finetune_dir's names


def run(
    runs_dir: Path, recipe_args: list[str], finetune_length: list[str], learning_rates: list[str], seeds: list[int],
    mlm_steps: int | None = None,
) -> int:  # fmt: skip
    """Pretrain with each objective (`recipe_args`; the masked LM for `mlm_steps` if given), then fine-tune each
    pretrained encoder and the random one on SST-2 (`finetune_length`: the fine-tuning recipe's run-length arguments)
    at every learning rate and seed; returns the number of failed runs."""
    failed = 0
    for objective in OBJECTIVES:
        pretrained = runs_dir / f"pretrain-{objective}"
        if (pretrained / "model.safetensors").is_file():
            continue
        print(f"{pretrained}: pretraining", flush=True)
        args = [*recipe_args, "--objective", objective]
        if objective == "mlm" and mlm_steps is not None:
            if "--max_steps" in args:
                at = args.index("--max_steps")
                del args[at : at + 2]
            args += ["--max_steps", str(mlm_steps)]
        failed += record(pretrained, args) != 0
    for base in BASES:
        pretrained = runs_dir / f"pretrain-{'mlm' if base == 'scratch' else base}"
        if not (pretrained / "model.safetensors").is_file():
            continue  # its pretraining failed, counted above
        method = ["--method", "full", *(["--from_scratch", "true"] if base == "scratch" else [])]
        for learning_rate in learning_rates:
            for seed in seeds:
                length = [*finetune_length, "--learning_rate", learning_rate, "--seed", str(seed)]
                failed += run_once(finetune_dir(runs_dir, base, learning_rate, seed), RECIPE, pretrained, method,
                                   (TASKS["sst2"][0], length))  # fmt: skip
    return failed


def _load(run_dir: Path) -> dict[str, float]:
    loads = [sample[1] for sample in json.loads((run_dir / RUN_RECORD).read_text())["load_average_samples"]]
    return {"mean": statistics.fmean(loads), "max": max(loads)}


def _finetuning(run_dir: Path) -> dict[str, Any]:
    record_ = json.loads((run_dir / RUN_RECORD).read_text())
    metrics = {k: v for k, v in run_metrics(run_dir).items() if k != "model_kwargs"}
    return {**metrics, "wall_s": record_["process_wall_s"], "load": _load(run_dir), "command": record_["command"],
            "git": record_["git"]}  # fmt: skip


def collect(runs_dir: Path, card_command: str) -> dict[str, Any]:
    """results.json: per objective the pretraining summary (with its last evaluation); per base, learning rate and
    seed the SST-2 fine-tuning run."""
    from hfzoo.training.logging import read_log

    results: dict[str, Any] = {"runs_dir": shown(str(runs_dir)), "objectives": {}, "sst2": {}}
    for objective in OBJECTIVES:
        pretrained = runs_dir / f"pretrain-{objective}"
        summary = summarize(pretrained, card_command)
        summary["last_evaluation"] = [r for r in read_log(pretrained) if r["event"] == "eval"][-1]
        summary["load"] = _load(pretrained)
        results["objectives"][objective] = summary
    finetuned = {}
    for run_dir in sorted(runs_dir.iterdir()):
        if (name := FINETUNE_RUN.fullmatch(run_dir.name)) is None:
            continue
        if not run_complete(run_dir):
            raise SystemExit(f"card: {run_dir} is not finished; the same `run` command finishes it")
        finetuned[name["base"], name["rate"], name["seed"]] = run_dir
    # bases in BASES' order, learning rates ascending (not the folder names' order), seeds as named
    for base, rate, seed in sorted(finetuned, key=lambda key: (BASES.index(key[0]), float(key[1]), int(key[2]))):
        results["sst2"].setdefault(base, {}).setdefault(rate, {})[seed] = _finetuning(finetuned[base, rate, seed])
    results["sst2_majority_class_accuracy"] = baselines(next(iter(finetuned.values())))["majority_class_accuracy"]
    results["machine"] = results["objectives"]["mlm"]["machine"]
    return results


def _accuracies(seeds: dict[str, Any]) -> list[float]:
    return [run["accuracy"] for run in seeds.values()]


def best_learning_rate(results: dict[str, Any], base: str) -> str:
    """The base's learning rate with the highest mean accuracy over the seeds (each base gets its own best, as the
    ELECTRA and BERT papers tune the fine-tuning learning rate per model)."""
    return max(results["sst2"][base], key=lambda rate: statistics.fmean(_accuracies(results["sst2"][base][rate])))


def _pretraining_table(results: dict[str, Any]) -> str:
    rows = []
    for objective, s in results["objectives"].items():
        t, last = s["training"], s["last_evaluation"]
        discriminator = last.get("eval_discriminator_loss")
        rows.append([
            objective, f"{s['parameters']:,}", t["steps"], f"{t['tokens_seen']:,}", f"{t['loop_wall_s']:.0f} s",
            f"{t['process_wall_s']:.0f} s", f"{t['tokens_per_s_median']:,.0f}",
            f"{s['final']['perplexity']:.1f}", f"{s['baseline']['unigram_perplexity']:.1f}",
            "-" if discriminator is None else f"{discriminator:.4f}", f"{s['load']['mean']:.1f}",
        ])  # fmt: skip
    headers = ["objective", "parameters trained", "steps", "tokens seen", "loop wall time", "process wall time",
               "tokens/s (median)", "masked-LM perplexity", "unigram perplexity", "discriminator loss", "load"]
    return markdown_table(headers, rows)


def _finetuning_table(results: dict[str, Any]) -> str:
    rows = []
    for base, rates in results["sst2"].items():
        best = best_learning_rate(results, base)
        for rate, seeds in rates.items():
            accuracies = _accuracies(seeds)
            first = next(iter(seeds.values()))
            rows.append([
                f"{base}{'' if base == 'scratch' else ' base'}", rate + (" (best)" if rate == best else ""),
                f"{statistics.fmean(accuracies):.4f}", f"{min(accuracies):.4f} - {max(accuracies):.4f}",
                " / ".join(f"{a:.4f}" for a in accuracies), ", ".join(seeds),
                f"{statistics.fmean(run['matthews_correlation'] for run in seeds.values()):.4f}",
                first["steps"], first["epochs"], f"{statistics.fmean(run['wall_s'] for run in seeds.values()):.0f} s",
            ])  # fmt: skip
    rows.append(["majority class", "-", f"{results['sst2_majority_class_accuracy']:.4f}", *["-"] * 7])
    return markdown_table(["fine-tuned from", "learning rate", "mean accuracy", "min - max", "per seed", "seeds",
                           "mean matthews_correlation", "steps", "epochs", "mean wall time"], rows)  # fmt: skip


def _points(results: dict[str, Any], base: str) -> tuple[float, list[float]]:
    """The base's mean accuracy at its best learning rate, in points, and the seeds' accuracies in points."""
    accuracies = [100 * a for a in _accuracies(results["sst2"][base][best_learning_rate(results, base)])]
    return statistics.fmean(accuracies), accuracies


def _verdicts(results: dict[str, Any]) -> str:
    mlm, electra = results["objectives"]["mlm"]["training"], results["objectives"]["electra"]["training"]
    (mlm_mean, mlm_seeds), (electra_mean, electra_seeds) = _points(results, "mlm"), _points(results, "electra")
    gain = electra_mean - mlm_mean
    compute = electra["loop_wall_s"] / mlm["loop_wall_s"]
    # at each run's median speed: a ratio that a busy minute of the shared machine does not move
    steady = (electra["steps"] / electra["tokens_per_s_median"]) / (mlm["steps"] / mlm["tokens_per_s_median"])
    apart = min(electra_seeds) > max(mlm_seeds) or max(electra_seeds) < min(mlm_seeds)
    seeds = "on every seed: the seeds' ranges do not overlap" if apart else "the seeds' ranges overlap"
    lines = [
        (f"ELECTRA {'beats' if gain > 0 else 'does not beat'} masked-LM pretraining at equal compute, fine-tuned on "
         f"SST-2: {electra_mean:.2f} vs {mlm_mean:.2f} mean accuracy ({gain:+.2f} points, {seeds}; each at its best "
         f"learning rate, over {len(electra_seeds)} seeds)"),
        (f"the compute: ELECTRA's {electra['steps']} steps took {electra['loop_wall_s']:.0f} s of training loop, the "
         f"masked LM's {mlm['steps']} steps {mlm['loop_wall_s']:.0f} s ({compute:.2f}x; {steady:.2f}x at each run's "
         "median speed; the same tokens per step)"),
    ]  # fmt: skip
    if "scratch" in results["sst2"]:
        scratch_mean, _ = _points(results, "scratch")
        for objective, mean in (("mlm", mlm_mean), ("electra", electra_mean)):
            gain = mean - scratch_mean
            lines.append(f"the {objective} pretraining {'transfers' if gain > 0 else 'does NOT transfer'}: "
                         f"{mean:.2f} vs {scratch_mean:.2f} from random weights ({gain:+.2f} points)")  # fmt: skip
    majority = 100 * results["sst2_majority_class_accuracy"]
    lines += [f"the {base} base {'beats' if mean > majority else 'does NOT beat'} the majority class ({mean:.2f} vs "
              f"{majority:.2f})" for base, mean in (("mlm", mlm_mean), ("electra", electra_mean))]  # fmt: skip
    return "\n".join(f"- {line}." for line in lines)


def render(results: dict[str, Any], card_command: str) -> str:
    mlm, electra = results["objectives"]["mlm"], results["objectives"]["electra"]
    electra_options = electra["config"]["objective_options"]
    intro = (
        f"`{mlm['preset']}` pretrained from scratch on {mlm['data']['name']} twice by `recipes/pretrain.py`, with the "
        "same data order, batch, learning-rate schedule and seed: once as a masked LM (`--objective mlm`), once as "
        "ELECTRA's discriminator (`--objective electra`: a generator of 1/4 the width, unless "
        f"`objective_options` say otherwise (here {electra_options or 'the defaults'}), fills 15% masked tokens by "
        "sampling, the discriminator labels every token replaced or original; loss = generator MLM loss + 50 x "
        "discriminator loss). ELECTRA's step costs more (its generator's forward and backward), so the masked LM "
        f"trains for more steps ({mlm['training']['steps']} against {electra['training']['steps']}) to spend the same "
        "compute, as in the ELECTRA paper's comparisons at equal compute. Each kept encoder (the masked LM's; "
        "ELECTRA's discriminator), and the same encoder with random weights (`scratch`: the masked LM's config and "
        "tokenizer), is then fine-tuned fully on SST-2 by `recipes/finetune.py` at each learning rate and seed, "
        "scored on the 872 validation sentences. Generated by `model_cards/generate_electra_results.py` from the run "
        "folders."
    )
    perplexity_note = (
        "`masked-LM perplexity` is the masked LM's own for `mlm` and ELECTRA's generator's for `electra` (a model "
        "of 1/4 the width, which is only the discriminator's teacher); both on the same validation masks, against the "
        "unigram baseline of those targets. `parameters trained` counts ELECTRA's generator too (the embeddings are "
        "shared); the kept discriminator has the masked LM's encoder size. `load` is the mean 1-minute load average "
        "during the run on 2 cores: above 2 the run shared the CPU and its wall time is a ceiling."
    )
    runs = [(f"pretrain-{objective}", s["machine"]["git"], s["commands"]["run"])
            for objective, s in results["objectives"].items()]  # fmt: skip
    runs += [(f"sst2-{base}-lr{rate}-seed{seed}", run["git"], run["command"]) for base, rates in results["sst2"].items()
             for rate, seeds in rates.items() for seed, run in seeds.items()]  # fmt: skip
    commands = "\n".join(command for _, _, command in runs)
    machine = results["machine"]
    rows = [[name, git["commit"][:12], ", ".join(git["uncommitted"]) or "none"] for name, git, _ in runs]
    machine_text = (
        f"{machine.get('cpu', '?')}, {machine.get('cores', '?')} cores, {machine.get('memory_gib', '?')} GiB; Python "
        f"{machine.get('python', '?')}, torch {machine.get('torch', '?')}. The code each run ran:\n\n"
        + markdown_table(["run", "commit", "files under hfzoo/ and recipes/ uncommitted when it started"], rows)
    )
    sections = [
        Section("ELECTRA vs masked-LM pretraining at equal compute, then SST-2", intro, level=1),
        Section("Verdict", _verdicts(results)),
        Section("Pretraining (same compute)", _pretraining_table(results) + "\n\n" + perplexity_note),
        Section("Fine-tuning on SST-2 (every base: the same learning rates, seeds and steps)",
                _finetuning_table(results)),
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
    runs.add_argument("--mlm-steps", type=int, help="the masked LM's --max_steps (equal compute: ELECTRA's step "
                      "costs more); default: the steps given after --")  # fmt: skip
    runs.add_argument("--finetune-learning-rates", nargs="+", default=["1e-4", "3e-4", "1e-3"])
    runs.add_argument("--finetune-seeds", nargs="+", type=int, default=[42, 43, 44])
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
        sys.exit(run(runs_dir, recipe_args, FINETUNE_LENGTH, args.finetune_learning_rates, args.finetune_seeds,
                     args.mlm_steps))  # fmt: skip
    print(card(runs_dir, card_dir))


if __name__ == "__main__":
    main()
