"""The speedrun's lessons one at a time (issue 36 item 2): gpt-tiny at nanoGPT's CPU settings on Tiny Shakespeare's
characters, trained for the same wall budget with each change of the modded-nanoGPT speedrun added on top of the
previous ones, so that each row says what its change buys per second on this machine.

A fixed wall budget, not a fixed step count: a change that makes steps dearer (Muon's orthogonalisation) must pay
for them in loss. Each variant first trains a short calibration run; its median tokens/s gives the steps that fill
the budget (`hfzoo.training.logging.steps_filling`), and the run's schedule (warmup 5%, then its decay) spans those
steps. Every run is recorded (command, machine, load) and continued from its checkpoint when stopped:

    python model_cards/generate_speedrun_ablation.py run runs/results/clm-speedrun-shakespeare --minutes 2 --jobs 2
    python model_cards/generate_speedrun_ablation.py card runs/results/clm-speedrun-shakespeare \
        model_cards/results/clm-speedrun-shakespeare

The card (README.md, the validation curves, results.json) is made from the runs' records, which it first copies
into its own `run_records/` (runs/ is git-ignored), so it regenerates where the run folders are gone.
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
from recording import REPO_ROOT, RUN_RECORD, run_complete, shown

from hfzoo.card_writing import (
    CARD, Curve, RunRecord, Section, markdown_table, model_card_data, plot_losses, render_card,
)  # fmt: skip
from hfzoo.core.files import write_atomic
from hfzoo.training.logging import steps_filling

sys.path.insert(0, str(REPO_ROOT / "benchmarks"))
from bench_shakespeare import DATA, SETTINGS, write_splits  # noqa: E402  (the side-by-side's data and settings)
from recipe_runs import read_run  # noqa: E402

ARCHIVE = "run_records"
RECORDS = ("log.jsonl", "training_config.yaml", RUN_RECORD)
CURVES = "validation_curves.png"
RESULTS = "results.json"
# Long enough for a median over 20 logged intervals, logged as the runs log, so a hiccup of the machine does not size
# a variant's budget (40 steps logged one by one gave budgets from 118 to 155 s for the same 2 minutes).
CALIBRATION_STEPS = 200
# Cumulative: each variant is the previous one plus its change (recipe keys), in the speedrun's order of adoption.
VARIANTS: list[tuple[str, str, list[str]]] = [
    ("baseline", "gpt-tiny as GPT-2 (learned positions, GELU, tied head), AdamW, cosine", []),
    ("rotary", "rotary positions", ["--model.position_embedding", "rotary"]),
    ("qk_norm", "RMS-normed queries and keys", ["--model.qk_norm", "true"]),
    ("relu2", "ReLU² MLP", ["--model.activation", "relu2"]),
    ("untied", "untied output head", ["--model.tie_word_embeddings", "false"]),
    ("softcap", "logit soft-capping at 30", ["--model.logit_softcap", "30"]),
    ("zero_init", "zero-initialised projections", ["--model.zero_init_projections", "true"]),
    ("wsd", "warmup-stable-decay schedule", ["--lr_schedule", "wsd"]),
    ("muon", "Muon on the hidden matrices", ["--optimizer", "muon"]),
]


def recipe_args(data_dir: Path, upto: int) -> list[str]:
    """The recipe's arguments for variant `upto` (index into VARIANTS): the side-by-side's settings and every change
    up to it."""
    settings = {key: value for key, value in SETTINGS.items() if key not in ("max_steps", "warmup_steps", "eval_every")}
    args = [part for key, value in settings.items() for part in (f"--{key}", str(value))]
    changes = [part for _, _, change in VARIANTS[: upto + 1] for part in change]
    return [*args, *changes, "--dataset", shown(str(data_dir))]


def prepare_data(runs_dir: Path, text_limit: int | None) -> Path:
    """The text's splits in `runs_dir/data`, written once for every variant."""
    data_dir = runs_dir / "data"
    if not (data_dir / "train.jsonl").is_file():
        data_dir.mkdir(parents=True, exist_ok=True)
        text = DATA.read_text(encoding="utf-8")
        write_splits(text[:text_limit] if text_limit else text, data_dir)
    return data_dir


def run_pinned(runs_dir: Path, minutes: float, names: list[str], text_limit: int | None, jobs: int) -> int:
    """The variants shared out over `jobs` cores, each core running its share one by one with one thread, pinned to
    it, as the side-by-side with nanoGPT runs; the number of failed shares. Every variant's calibration and run are
    made on the same core under the same neighbour load, so the budgets stay comparable."""
    prepare_data(runs_dir, text_limit)
    chosen, cores = names or [name for name, _, _ in VARIANTS], sorted(os.sched_getaffinity(0))
    if jobs > len(cores):
        raise SystemExit(f"run: --jobs {jobs} needs {jobs} cores; this process may use {len(cores)}")
    shares = []
    for core in cores[:jobs]:
        share = chosen[cores.index(core) :: jobs]
        command = [sys.executable, __file__, "run", str(runs_dir), "--minutes", str(minutes), "--variants", *share]
        command += ["--characters", str(text_limit)] if text_limit else []
        shares.append(subprocess.Popen(command, env={**os.environ, "OMP_NUM_THREADS": "1"},
                                       preexec_fn=lambda core=core: os.sched_setaffinity(0, {core})))  # fmt: skip
    return sum(share.wait() != 0 for share in shares)


def run_variants(runs_dir: Path, minutes: float, names: list[str], text_limit: int | None) -> int:
    """Calibrate and run each variant named (all by default) not finished yet; the number of failed runs."""
    data_dir = prepare_data(runs_dir, text_limit)
    failed = 0
    for index, (name, _, _) in enumerate(VARIANTS):
        if names and name not in names:
            continue
        args, calibration, run_dir = recipe_args(data_dir, index), runs_dir / f"{name}-calibration", runs_dir / name
        if not run_complete(calibration, "model.safetensors"):
            steps = str(CALIBRATION_STEPS)
            if record(calibration, [*args, "--max_steps", steps, "--warmup_steps", "10", "--eval_every", steps,
                                    "--save_every", steps]):  # fmt: skip
                failed += 1
                continue
        if run_complete(run_dir, "model.safetensors"):
            continue
        steps = steps_filling(minutes, calibration)
        every = max(steps // 8, 1)
        failed += record(run_dir, [*args, "--max_steps", str(steps), "--warmup_steps", str(max(steps // 20, 1)),
                                   "--eval_every", str(every), "--save_every", str(every)]) != 0  # fmt: skip
    return failed


def summary(run_dir: Path) -> dict[str, Any]:
    """What the card shows of a run: its log's figures (`recipe_runs.read_run`, as the benchmarks read them) and its
    recorded command."""
    run_record = json.loads((run_dir / RUN_RECORD).read_text())
    machine = run_record["machine"]
    return {**read_run(run_dir), "command": run_record["command"], "cores": machine["cores"],
            "threads": machine["torch_threads"]}  # fmt: skip


KIND = "speedrun-ablation"  # results.json's `kind`: how tests/cards/test_generated_docs.py knows the card


def card_command(runs_dir: str | Path, card_dir: str | Path) -> str:
    """The command that makes the card in `card_dir` (shown as the card shows it)."""
    return shlex.join(["python", "model_cards/generate_speedrun_ablation.py", "card", shown(str(runs_dir)),
                       shown(str(card_dir))])  # fmt: skip


def render(results: dict[str, Any], command: str) -> str:
    """The card's README.md from its results.json alone."""
    variants, rows, previous = results["variants"], [], None
    for name, change, _ in VARIANTS:
        if name not in variants:
            rows.append([name, change, "not run yet", "", "", "", ""])
            continue
        s = variants[name]
        delta = "" if previous is None else f"{s['validation_loss'] - previous:+.4f}"
        rows.append([name, change, f"{s['steps']:,}", f"{s['train_s']:.0f} s", f"{s['tokens_per_s_median']:,.0f}",
                     f"{s['validation_loss']:.4f}", delta])  # fmt: skip
        previous = s["validation_loss"]
    table = markdown_table(["variant", "adds", "steps in the budget", "training loop", "tokens/s (median)",
                            "final validation loss", "vs the previous finished row"], rows)  # fmt: skip
    intro = ("gpt-tiny (4 layers, 4 heads, 128 wide) on Tiny Shakespeare's characters at nanoGPT's CPU settings "
             "(batch 12 x 64, AdamW lr 1e-3, beta2 0.99, weight decay 0.1, clipping 1.0), each variant trained for "
             "the steps that fill the same wall budget at the speed its calibration run measured, each adding one "
             "change of the modded-nanoGPT speedrun to the previous one. Generated by "
             "`model_cards/generate_speedrun_ablation.py` from the recorded runs; no number is typed by hand.")
    placement = {(s["cores"], s["threads"]) for s in variants.values()}
    if placement == {(1, 1)}:
        intro += (" Each run had one core and one thread (`--jobs 2`: two variants at a time, one on each core, as "
                  "the side-by-side with nanoGPT runs).")
    else:
        intro += f" Cores and threads per run: {', '.join(f'{c} and {t}' for c, t in sorted(placement))}."
    loops = [s["train_s"] for s in variants.values()]
    intro += (f" The training loops took {min(loops):.0f} to {max(loops):.0f} s (the calibrations' speed sized the "
              "steps, the loops include the evaluations): compare a row's loss with its time, not only with its "
              "neighbour's.")
    commands = "\n".join(s["command"] for s in variants.values())
    sections = [
        Section("The speedrun's changes, one at a time, at a fixed wall budget", intro, level=1),
        Section("Results", f"{table}\n\n![validation curves]({CURVES})"),
        Section("Commands", f"The runs, as recorded:\n\n```bash\n{commands}\n```\n\nThis card:\n\n```bash\n"
                f"{command}\n```"),
    ]  # fmt: skip
    metadata = model_card_data(None, ["hfzoo", "gpt-tiny", "speedrun", "ablation", "results"])
    return render_card(RunRecord(KIND, {}, summary=variants), sections, metadata)


def card(runs_dir: Path, card_dir: Path) -> Path:
    """README.md, the curves and results.json into `card_dir`, from the runs archived there: those already kept, and
    the finished runs of `runs_dir` (if it is there), which replace their earlier copies."""
    archive = card_dir / ARCHIVE
    for name, _, _ in VARIANTS:
        if run_complete(runs_dir / name, "model.safetensors"):
            (archive / name).mkdir(parents=True, exist_ok=True)
            for file in RECORDS:
                write_atomic(archive / name / file, (runs_dir / name / file).read_bytes())
    variants = {name: summary(archive / name) for name, _, _ in VARIANTS if (archive / name / RUN_RECORD).is_file()}
    if not variants:
        raise SystemExit(f"card: no variant of {shown(str(runs_dir))} is finished; `run` goes on with them")
    curves = [Curve([p["train_s"] or 0.0 for p in s["curve"]], [p["validation_loss"] for p in s["curve"]], name, "o-")
              for name, s in variants.items()]  # fmt: skip
    plot_losses(card_dir / CURVES, curves, xlabel="training loop (seconds)", ylabel="validation loss (nats/char)",
                dpi=100)  # fmt: skip
    results = {"kind": KIND, "runs_dir": shown(str(runs_dir)), "variants": variants}
    write_atomic(card_dir / RESULTS, json.dumps(results, indent=1) + "\n")
    return write_atomic(card_dir / CARD, render(results, card_command(runs_dir, card_dir)))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    runs = commands.add_parser("run", help="calibrate and run each variant at the wall budget")
    runs.add_argument("runs_dir", type=Path)
    runs.add_argument("--minutes", type=float, default=2.0, help="each variant's training budget")
    runs.add_argument("--variants", nargs="+", default=[], choices=[name for name, _, _ in VARIANTS],
                      help="only these (default: all, in order)")  # fmt: skip
    runs.add_argument("--characters", type=int, help="only the text's first N characters (the script's test)")
    runs.add_argument("--jobs", type=int, default=1, help="run the variants on this many cores at once, one thread "
                      "each, pinned (default: one after the other, with every thread)")  # fmt: skip
    make = commands.add_parser("card", help="README.md, curves and results.json from the finished variants")
    make.add_argument("runs_dir", type=Path)
    make.add_argument("card_dir", type=Path)
    args = parser.parse_args(argv)
    runs_dir, card_dir = args.runs_dir.resolve(), args.card_dir.resolve() if args.command == "card" else None
    os.chdir(REPO_ROOT)  # the recorded commands are relative to the repository root
    if args.command == "card":
        print(card(runs_dir, card_dir))
        return 0
    if args.jobs > 1:
        return int(run_pinned(runs_dir, args.minutes, args.variants, args.characters, args.jobs) > 0)
    return int(run_variants(runs_dir, args.minutes, args.variants, args.characters) > 0)


if __name__ == "__main__":
    sys.exit(main())
