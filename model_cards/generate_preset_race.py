"""Recipe configs raced on one corpus for the same wall budget, at the same time, each on a core of its own with one
thread (issue 36's enwiki target: the new decoder preset reaches the old default's final validation loss in at most
0.6x the time):

    python model_cards/generate_preset_race.py run runs/results/clm-speedrun-enwiki --minutes 30 \\
        recipes/configs/gpt-small-enwiki-clm.yaml recipes/configs/gpt-speedrun-small-enwiki-clm.yaml
    python model_cards/generate_preset_race.py card runs/results/clm-speedrun-enwiki \\
        model_cards/results/clm-speedrun-enwiki

One tokenizer for all (trained by a one-step run of the first config, then read by every run). Each config's steps
fill the budget at the speed of its own calibration run, made beside the others' as the runs are; its schedule spans
them and it evaluates ten times. The card compares every config with the first: its final validation loss, and the
training seconds it took to reach the first config's final loss (read off its validation curve, so a schedule that
decays late is counted at the loss it had before decaying: a conservative figure). Runs are recorded and continued
from their checkpoints when stopped; the card is made from the records it archives.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Any

from generate_results import record
from generate_speedrun_ablation import summary  # a run's figures, command and placement, as the ablation's card shows
from recording import REPO_ROOT, RUN_RECORD, run_complete, shown

from hfzoo.card_writing import CARD, Curve, RunRecord, Section, markdown_table, model_card_data, plot_losses, render_card
from hfzoo.core.files import write_atomic
from hfzoo.training.logging import steps_filling

KIND = "preset-race"  # results.json's `kind`: how tests/cards/test_generated_docs.py knows the card
ARCHIVE = "run_records"
RECORDS = ("log.jsonl", "training_config.yaml", RUN_RECORD)
CURVES = "validation_curves.png"
RESULTS = "results.json"
RACE = "race.json"  # `run`'s budget and the configs' names in its order, the first first (in the runs folder)
CALIBRATION_STEPS = 40
TARGET_TIME_RATIO = 0.6  # issue 36: the first config's final loss in at most this share of its time


def pinned(jobs: dict[str, list[str]]) -> int:
    """Each job (its `one` arguments) in a process of its own, pinned to a core with one thread, all at once; the
    number that failed."""
    cores = sorted(os.sched_getaffinity(0))
    if len(jobs) > len(cores):
        raise SystemExit(f"run: {len(jobs)} configs race on a core each; this process may use {len(cores)}")
    processes = [
        subprocess.Popen([sys.executable, __file__, "one", *arguments], env={**os.environ, "OMP_NUM_THREADS": "1"},
                         preexec_fn=lambda core=core: os.sched_setaffinity(0, {core}))
        for core, arguments in zip(cores, jobs.values())
    ]  # fmt: skip
    return sum(process.wait() != 0 for process in processes)


def race(runs_dir: Path, configs: list[str], minutes: float, extra: list[str]) -> int:
    """The tokenizer, the calibrations, then the runs; the number of failed steps."""
    tokenizer = runs_dir / "tokenizer"
    if not run_complete(tokenizer, "model.safetensors"):
        if record(tokenizer, ["--config", configs[0], *extra, "--max_steps", "1", "--eval_every", "1"]):
            return 1
    common = [*extra, "--tokenizer", shown(str(tokenizer))]
    names = {config: Path(config).stem for config in configs}
    write_atomic(runs_dir / RACE, json.dumps({"minutes": minutes, "order": list(names.values())}) + "\n")
    calibrations = {config: runs_dir / f"{name}-calibration" for config, name in names.items()}
    steps = str(CALIBRATION_STEPS)
    failed = pinned({config: [str(run), "--", "--config", config, *common, "--max_steps", steps, "--warmup_steps",
                              "5", "--eval_every", steps, "--save_every", steps]
                     for config, run in calibrations.items() if not run_complete(run, "model.safetensors")})  # fmt: skip
    if failed:
        return failed
    runs = {}
    for config, name in names.items():
        planned = steps_filling(minutes, calibrations[config])
        every = str(max(planned // 10, 1))
        runs[config] = [str(runs_dir / name), "--", "--config", config, *common, "--max_steps", str(planned),
                        "--eval_every", every, "--save_every", every]  # fmt: skip
    return pinned({config: job for config, job in runs.items() if not run_complete(Path(job[0]), "model.safetensors")})


def seconds_to_reach(curve: list[dict], loss: float) -> float | None:
    """The training seconds at which the validation curve first reaches `loss` (linear between evaluations)."""
    previous = None
    for point in curve:
        if point["train_s"] is not None and point["validation_loss"] <= loss:
            if previous is None:
                return point["train_s"]
            span = previous["validation_loss"] - point["validation_loss"]
            share = (previous["validation_loss"] - loss) / span if span else 1.0
            return previous["train_s"] + share * (point["train_s"] - previous["train_s"])
        previous = point if point["train_s"] is not None else previous
    return None


def card_command(runs_dir: str | Path, card_dir: str | Path) -> str:
    return shlex.join(["python", "model_cards/generate_preset_race.py", "card", shown(str(runs_dir)),
                       shown(str(card_dir))])  # fmt: skip


def render(results: dict[str, Any], command: str) -> str:
    """The card's README.md from its results.json alone."""
    runs = results["runs"]
    first_name, first = next(iter(runs.items()))
    rows, verdicts = [], []
    for name, s in runs.items():
        reach = seconds_to_reach(s["curve"], first["validation_loss"])
        ratio = None if reach is None else reach / first["train_s"]
        reached = "never" if ratio is None else f"{reach / 60:.1f} min ({ratio:.2f}x)"
        rows.append([name, f"{s['parameters']:,}", f"{s['steps']:,}", f"{s['train_s'] / 60:.1f} min",
                     f"{s['tokens_per_s_median']:,.0f}", f"{s['validation_loss']:.4f}",
                     "(the reference)" if name == first_name else reached])  # fmt: skip
        if name != first_name:
            met = ratio is not None and ratio <= TARGET_TIME_RATIO
            reached = "did not reach it" if ratio is None else f"took {ratio:.2f}x {first_name}'s time"
            verdicts.append(f"- {name} reaches {first_name}'s final validation loss ({first['validation_loss']:.4f}) "
                            f"in <= {TARGET_TIME_RATIO}x its time: {'met' if met else 'MISSED'} ({reached}).")
    table = markdown_table(["config", "parameters", "steps in the budget", "training loop", "tokens/s (median)",
                            "final validation loss", f"time to {first_name}'s final loss"], rows)  # fmt: skip
    placement = {(s["cores"], s["threads"]) for s in runs.values()}
    budget = f"{results['minutes']:g}-minute" if results["minutes"] else "same"
    intro = (f"{len(runs)} recipe configs on the same corpus and tokenizer, each trained for the steps that fill a "
             f"{budget} training budget at the speed its calibration run measured (the loops also evaluate ten "
             "times), all at the same time"
             + (", each on one core with one thread." if placement == {(1, 1)} else f" (cores and threads: "
                f"{sorted(placement)}).")
             + " The time to reach the first config's final loss is read off each validation curve (linear between "
             "evaluations), so a schedule that decays late is counted at the loss it had before decaying. Generated "
             "by `model_cards/generate_preset_race.py` from the recorded runs; no number is typed by hand.")  # fmt: skip
    commands = "\n".join(s["command"] for s in runs.values())
    sections = [
        Section("Recipe configs raced at a fixed wall budget", intro, level=1),
        Section("Results", f"{table}\n\n" + "\n".join(verdicts) + f"\n\n![validation curves]({CURVES})"),
        Section("Commands", f"The runs, as recorded:\n\n```bash\n{commands}\n```\n\nThis card:\n\n```bash\n"
                f"{command}\n```"),
    ]  # fmt: skip
    metadata = model_card_data(None, ["hfzoo", "race", "results"])
    return render_card(RunRecord(KIND, {}, summary=runs), sections, metadata)


def card(runs_dir: Path, card_dir: Path) -> Path:
    """README.md, the curves and results.json into `card_dir` from the archived runs (refreshed from `runs_dir`)."""
    archive = card_dir / ARCHIVE
    for run in sorted(runs_dir.glob("*")) if runs_dir.is_dir() else []:
        if run.name != "tokenizer" and not run.name.endswith("-calibration") and run_complete(run, "model.safetensors"):
            (archive / run.name).mkdir(parents=True, exist_ok=True)
            for file in RECORDS:
                write_atomic(archive / run.name / file, (run / file).read_bytes())
    known = runs_dir / RACE if (runs_dir / RACE).is_file() else card_dir / RESULTS
    race_settings = json.loads(known.read_text()) if known.is_file() else {"minutes": None, "order": []}
    order = race_settings["order"]
    finished = [run.name for run in sorted(archive.glob("*")) if (run / RUN_RECORD).is_file()]
    order = [name for name in order if name in finished] + [name for name in finished if name not in order]
    if not order:
        raise SystemExit(f"card: no run of {shown(str(runs_dir))} is finished; `run` goes on with them")
    runs = {name: summary(archive / name) for name in order}
    plot_losses(card_dir / CURVES, [Curve([p["train_s"] or 0.0 for p in s["curve"]],
                                          [p["validation_loss"] for p in s["curve"]], name, "o-")
                                    for name, s in runs.items()],
                xlabel="training loop (seconds)", ylabel="validation loss (nats/token)", dpi=100)  # fmt: skip
    results = {"kind": KIND, "runs_dir": shown(str(runs_dir)), "minutes": race_settings["minutes"], "order": order,
               "runs": runs}  # fmt: skip
    write_atomic(card_dir / RESULTS, json.dumps(results, indent=1) + "\n")
    return write_atomic(card_dir / CARD, render(results, card_command(runs_dir, card_dir)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("run", help="the tokenizer, the calibrations, then every config at the wall budget")
    runs.add_argument("runs_dir", type=Path)
    runs.add_argument("configs", nargs="+", help="recipe configs; the first is the one the others are measured by")
    runs.add_argument("--minutes", type=float, default=30.0, help="each config's training budget")
    runs.add_argument("--recipe_args", default="", help="more recipe arguments for every run (the script's test)")
    one = commands.add_parser("one", help=argparse.SUPPRESS)  # a pinned process's run (see `pinned`)
    one.add_argument("run_dir", type=Path)
    one.add_argument("recipe", nargs=argparse.REMAINDER)
    make = commands.add_parser("card", help="README.md, curves and results.json from the finished runs")
    make.add_argument("runs_dir", type=Path)
    make.add_argument("card_dir", type=Path)
    args = parser.parse_args(argv)
    os.chdir(REPO_ROOT)  # the recorded commands are relative to the repository root
    if args.command == "one":
        return int(record(args.run_dir, args.recipe[1:] if args.recipe[:1] == ["--"] else args.recipe) != 0)
    if args.command == "card":
        print(card(args.runs_dir.resolve(), args.card_dir.resolve()))
        return 0
    return int(race(args.runs_dir.resolve(), args.configs, args.minutes, shlex.split(args.recipe_args)) > 0)


if __name__ == "__main__":
    sys.exit(main())
