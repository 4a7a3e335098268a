"""The pretraining study's records and card (issue 35): the tasks every base is fine-tuned on, the run folders'
names, the archive of finished runs' records kept beside the card, the results gathered from it, every target's
verdict and the README that shows them. `generate_pretraining_study.py` makes the runs and calls `card`.
"""

from __future__ import annotations

import json
import re
import shlex
import statistics
from pathlib import Path
from typing import Any

from generate_finetune_results import baselines
from generate_results import BASELINE, DATA_SPLIT, recorded_config, recorded_pretraining, summarize, unigram_baseline
from recording import RUN_RECORD, run_complete, run_metrics, shown

import torch
from transformers import AutoModel, AutoTokenizer
from transformers.utils import logging as transformers_logging

from hfzoo.card_writing import CARD, Curve, RunRecord, Section, markdown_table, model_card_data, plot_losses, render_card
from hfzoo.core.files import write_atomic
from hfzoo.objectives.objective import OBJECTIVES
from hfzoo.training.logging import read_log
from hfzoo.training.run_inputs import run_inputs, tokenizer_file_names

RESULTS = "results.json"
CURVES = "validation_curves.png"
ACCURACY_CURVES = "validation_accuracy.png"
SCRATCH = "scratch"
STARTED_BY = "command.json"  # the study commands that made a folder's runs, each once, in the order they ran
CONSTANT_LOSS = "eval_discriminator_constant_loss"  # ELECTRA's reference: guessing the replaced share everywhere
DISCRIMINATOR_STEPS = (250, 500, 1000, 2500)  # the evaluations its table shows, beside the last
STEP_FLOPS = "step_flops.json"  # `flops`' count, in the runs folder and archived with the card
# The tokenizer a study's runs share (`--tokenizer`): the command that trained it and its files' sizes and SHA-256,
# written beside it by `generate_pretraining_study.py tokenizer` and archived with the card.
TOKENIZER_RECORD = "tokenizer_record.json"
ARCHIVE = "run_records"  # in the card's folder (not `runs/`, which git ignores)
# What the card reads of a finished run, small enough to commit (no weights, no checkpoints); the run record last, as
# the recorder writes it: an archive that lacks it is unfinished, as a run folder is.
SIMILARITY = "token_similarity.json"  # `token_similarity`'s measure of the pretrained weights, kept without them
RECORDS = ("log.jsonl", "config.json", "training_config.yaml", "metrics.json", BASELINE, DATA_SPLIT, SIMILARITY,
           RUN_RECORD)  # fmt: skip
# Each task: its fine-tuning config, the run length and data, and the metric its learning rate is chosen by.
TASKS: dict[str, tuple[str, list[str], str]] = {
    "conll2003": ("recipes/configs/finetune/conll2003.yaml", ["--num_epochs", "2"], "f1"),
    # 1,000 of SST-2's 67,349 training phrases, drawn with seed 0 (the same for every run), 5 epochs: few labels,
    # where a pretrained encoder should matter most.
    "sst2-1k": ("recipes/configs/finetune/sst2.yaml",
                ["--max_train_samples", "1000", "--train_subset_seed", "0", "--num_epochs", "5"], "accuracy"),
    "sst2": ("recipes/configs/finetune/sst2.yaml", ["--max_train_samples", "null", "--num_epochs", "1"], "accuracy"),
    "rte": ("recipes/configs/finetune/rte.yaml", ["--max_length", "128", "--num_epochs", "6"], "accuracy"),
    # The same 1,000 phrases, text to text for an encoder-decoder base (T5's span corruption): the label generated.
    "sst2-1k-t5": ("recipes/configs/finetune/sst2-t5.yaml",
                   ["--max_train_samples", "1000", "--train_subset_seed", "0", "--num_epochs", "5"], "accuracy"),
}  # fmt: skip


def objective_of(base: str) -> str:
    """The objective a base was pretrained with: its name up to the label that tells two runs of it apart."""
    return base.partition(".")[0]


BASE_NAME = re.compile(r"[a-z_]+(?:\.[a-z0-9_]+)?")  # an objective, or OBJECTIVE.LABEL for another run of it
# finetune_dir's names
FINETUNE_RUN = re.compile(rf"(?P<task>.+?)-(?P<base>{BASE_NAME.pattern})-lr(?P<rate>.+)-seed(?P<seed>\d+)")
# The targets: (task, base, than, margin in points): base's mean >= than's mean + margin. A task and a base
# go together where the task is text to text exactly when the base's objective trains an encoder-decoder.
TEXT_TO_TEXT_TASKS = {"sst2-1k-t5"}
GAINS = [("conll2003", "*", SCRATCH, 10.0), ("sst2-1k", "*", SCRATCH, 5.0), ("sst2", "*", SCRATCH, 2.0),
         ("sst2-1k-t5", "*", SCRATCH, 5.0),
         ("conll2003", "electra", "mlm", 0.0), ("sst2-1k", "electra", "mlm", 0.0), ("conll2003", "spanbert", "mlm", 0.0)]


def _finished_runs(runs_dir: Path, pretrained_file: str) -> tuple[list[Path], list[tuple[Path, re.Match]]]:
    """The finished pretraining runs (`pretrained_file` there) and fine-tuning runs (with their names' parts)."""
    pretraining = [run for run in sorted(runs_dir.glob("pretrain-*")) if run_complete(run, pretrained_file)]
    names = [(run, FINETUNE_RUN.fullmatch(run.name)) for run in sorted(runs_dir.iterdir())]
    finetuning = [(run, name) for run, name in names if name and name["task"] in TASKS and run_complete(run)]
    return pretraining, finetuning


def _mean_cosine(vectors: torch.Tensor) -> float:
    """The mean cosine over the pairs of distinct rows of `vectors`."""
    unit, count = torch.nn.functional.normalize(vectors.float(), dim=-1), len(vectors)
    return (((unit @ unit.T).sum() - count) / (count * (count - 1))).item()


def token_similarity(run_dir: Path, texts: int = 64, blocks: int = 16) -> dict[str, Any]:
    """Per layer of a pretraining run's encoder (the embeddings' output first), the mean cosine between the vectors
    of two positions of one validation block, over the first `blocks` blocks of its first `texts` validation texts;
    written to `SIMILARITY`. At 1 every position holds the same vector: the encoder collapsed, and a task head has
    nothing to tell tokens apart by, whatever its pretraining loss says."""
    config, objective, tokenizer, (_, validation) = recorded_pretraining(
        run_dir, streaming=True, max_eval_samples=texts
    )
    examples = objective.examples(validation, tokenizer, config.data.block_size)
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()  # not its report of the pretraining head's weights, unused here
    try:
        model = AutoModel.from_pretrained(run_dir).eval()
    finally:
        transformers_logging.set_verbosity(verbosity)
    encoder = model.get_encoder() if model.config.is_encoder_decoder else model
    per_block = []
    with torch.no_grad():
        for example in examples.select(range(min(blocks, len(examples)))):
            inputs = {key: torch.tensor([example[key]]) for key in ("input_ids", "token_type_ids") if key in example}
            hidden_states = encoder(**inputs, output_hidden_states=True).hidden_states
            per_block.append([_mean_cosine(hidden[0]) for hidden in hidden_states])
    measured = {"blocks": len(per_block), "mean_cosine": [statistics.fmean(layer) for layer in zip(*per_block)]}
    write_atomic(run_dir / SIMILARITY, json.dumps(measured, indent=1) + "\n")
    return measured


def archive(runs_dir: Path, archive_dir: Path) -> list[str]:
    """Copies each finished run's `RECORDS` from `runs_dir` into `archive_dir` (a pretraining run's unigram baseline
    and token similarity measured first: they need its tokenizer, data and weights); the names of the runs copied."""
    pretraining, finetuning = _finished_runs(runs_dir, "model.safetensors")
    for run_dir in pretraining:
        if not (run_dir / BASELINE).is_file():
            unigram_baseline(run_dir)
        if not (run_dir / SIMILARITY).is_file():
            token_similarity(run_dir)
    archive_tokenizer(pretraining, archive_dir)
    copied = [*pretraining, *(run_dir for run_dir, _ in finetuning)]
    for run_dir in copied:
        kept = archive_dir / run_dir.name
        kept.mkdir(parents=True, exist_ok=True)
        (kept / RUN_RECORD).unlink(missing_ok=True)  # unfinished until its records are all there
        for name in RECORDS:
            if (run_dir / name).is_file():
                write_atomic(kept / name, (run_dir / name).read_bytes())
    if (runs_dir / STEP_FLOPS).is_file():  # merged: each runs folder may count only its own objectives
        counted = {**read_step_flops(archive_dir), **read_step_flops(runs_dir)}
        write_atomic(archive_dir / STEP_FLOPS, json.dumps(counted, indent=1) + "\n")
    add_study_commands(archive_dir, study_commands(runs_dir))
    return [run_dir.name for run_dir in copied]


def tokenizer_files(folder: Path) -> dict[str, Any]:
    """{file name: {size, sha256}} of the tokenizer saved in `folder`, as a pretraining checkpoint records it."""
    return run_inputs(folder, folder, tokenizer_file_names(AutoTokenizer.from_pretrained(folder)), [])["tokenizer"]


def archive_tokenizer(pretraining: list[Path], archive_dir: Path) -> None:
    """The local tokenizer folder the `pretraining` runs read, archived as `TOKENIZER_RECORD` with the command that
    trained it (where `generate_pretraining_study.py tokenizer` did). A study shares one tokenizer: a run that read
    other files than the archived runs did is refused, naming the folder, before anything is copied."""
    kept_file = archive_dir / TOKENIZER_RECORD
    kept = json.loads(kept_file.read_text()) if kept_file.is_file() else None
    unrecorded = sorted({path.parent.name for path in archive_dir.glob(f"pretrain-*/{RUN_RECORD}")}
                        - {run_dir.name for run_dir in pretraining})  # fmt: skip
    for run_dir in pretraining:
        named = recorded_config(run_dir).data.tokenizer
        if not named or not Path(named).is_dir():
            continue  # trained by the run itself, or a Hub name
        if kept is None and unrecorded:
            raise SystemExit(f"card: the runs archived in {shown(str(archive_dir))} ({', '.join(unrecorded)}) read a "
                             f"tokenizer whose files were not recorded, so {shown(str(run_dir))}, which read {named}, "
                             "cannot be shown to share it: give its runs a card of their own")  # fmt: skip
        files, made = tokenizer_files(Path(named)), Path(named) / TOKENIZER_RECORD
        command = json.loads(made.read_text())["command"] if made.is_file() else None
        if kept is not None and kept["files"] != files:
            raise SystemExit(f"card: {shown(str(run_dir))} read the tokenizer in {named}, whose files differ from the "
                             f"one the runs archived in {shown(str(archive_dir))} read ({TOKENIZER_RECORD}): the runs "
                             "of a study share one tokenizer")  # fmt: skip
        if kept is None or (kept["command"] is None and command):
            kept = {"folder": named, "command": command, "files": files}
            write_atomic(kept_file, json.dumps(kept, indent=1) + "\n")


def read_step_flops(folder: Path) -> dict[str, float]:
    """`flops`' count per objective kept in `folder` (a runs folder or a card's archive); none counted: empty."""
    counted = folder / STEP_FLOPS
    return json.loads(counted.read_text()) if counted.is_file() else {}


def study_commands(folder: Path) -> list[list[str]]:
    """The study commands (argument lists) that made the runs of `folder` (a runs folder or a card's archive); a
    runs folder of an earlier version kept its last command alone."""
    started = folder / STARTED_BY
    commands = json.loads(started.read_text()) if started.is_file() else []
    return [commands] if commands and isinstance(commands[0], str) else commands


def add_study_commands(folder: Path, commands: list[list[str]]) -> None:
    """Adds to the study commands of `folder` those it does not hold yet, after its own."""
    known = study_commands(folder)
    if added := [command for command in commands if command not in known]:
        write_atomic(folder / STARTED_BY, json.dumps([*known, *added]))


def collect(archive_dir: Path, card_command: str) -> dict[str, Any]:
    """results.json: each archived pretraining run's summary, and per task, base, rate and seed the archived
    fine-tuning runs' metrics (with their commands and code)."""
    results: dict[str, Any] = {"pretraining": {}, "finetuning": {}, "floors": {}}
    pretraining, finetuning = _finished_runs(archive_dir, "config.json")
    # In the order they ran: the first objective is the one the others' compute is matched to.
    pretraining.sort(key=lambda run_dir: json.loads((run_dir / RUN_RECORD).read_text())["started"])
    for run_dir in pretraining:
        summary = summarize(run_dir, card_command)
        summary["discriminator"] = [  # ELECTRA's: its loss and a constant guess's at each evaluation
            {"step": r["step"], "loss": r["eval_discriminator_loss"], "constant_loss": r.get(CONSTANT_LOSS)}
            for r in read_log(run_dir) if r["event"] == "eval" and "eval_discriminator_loss" in r
        ]  # fmt: skip
        if (run_dir / SIMILARITY).is_file():
            summary["token_similarity"] = json.loads((run_dir / SIMILARITY).read_text())
        results["pretraining"][run_dir.name.removeprefix("pretrain-")] = summary
    for run_dir, name in finetuning:
        recorded = json.loads((run_dir / RUN_RECORD).read_text())
        run = {**run_metrics(run_dir), "wall_s": recorded["process_wall_s"], "command": recorded["command"],
               "git": recorded["git"]}  # fmt: skip
        results["finetuning"].setdefault(name["task"], {}).setdefault(name["base"], {}).setdefault(
            name["rate"], {})[name["seed"]] = run
        if name["task"] not in results["floors"]:  # the task's data, read once
            results["floors"][name["task"]] = baselines(run_dir)
    results["step_flops"] = read_step_flops(archive_dir)
    if (archive_dir / TOKENIZER_RECORD).is_file():
        results["tokenizer"] = json.loads((archive_dir / TOKENIZER_RECORD).read_text())
    results["commands"] = study_commands(archive_dir)
    return results


def _scores(results: dict[str, Any], task: str, base: str) -> tuple[str, list[float]] | None:
    """The base's best learning rate on `task` (by the mean over its seeds, among the rates with the most seeds:
    the one `run` chose) and its seeds' scores in points; None if it has no finished run."""
    rates = results["finetuning"].get(task, {}).get(base)
    if not rates:
        return None
    metric = TASKS[task][2]
    most = max(len(seeds) for seeds in rates.values())
    best = max((rate for rate, seeds in rates.items() if len(seeds) == most),
               key=lambda rate: statistics.fmean(run[metric] for run in rates[rate].values()))  # fmt: skip
    return best, [100 * run[metric] for run in rates[best].values()]


def trains_encoder_decoder(results: dict[str, Any]) -> bool:
    """Whether the study pretrains an encoder-decoder (T5's span corruption): its tasks are text to text and its
    perplexity is the decoder's over the targets, not a masked LM's."""
    return any(OBJECTIVES[objective_of(base)].family == "encoder_decoder" for base in results["pretraining"])


def perplexity_name(results: dict[str, Any]) -> str:
    return "target perplexity" if trains_encoder_decoder(results) else "masked-LM perplexity"


def verdicts(results: dict[str, Any]) -> list[str]:
    """One line per target of the issue: met, missed (with the figures), waiting for a pretraining or not measured."""
    objectives, seq2seq = list(results["pretraining"]), trains_encoder_decoder(results)
    lines = []
    for task, base, than, margin in GAINS:
        if (task in TEXT_TO_TEXT_TASKS) != seq2seq:
            continue
        # a named objective's target holds for each run of it (`electra`, `electra.lr5e_5`)
        for side in objectives if base == "*" else [o for o in objectives if objective_of(o) == base] or [base]:
            mine, theirs = _scores(results, task, side), _scores(results, task, than)
            target = f"{task}: {side} >= {than}" + (f" + {margin:g} points" if margin else "")
            if unpretrained := [o for o in (side, than) if o != SCRATCH and o not in results["pretraining"]]:
                lines.append(f"{target}: waiting for the pretraining of {' and '.join(unpretrained)}")
                continue
            if mine is None or theirs is None:
                lines.append(f"{target}: not measured, no fine-tuning runs recorded")
                continue
            gain = statistics.fmean(mine[1]) - statistics.fmean(theirs[1])
            lines.append(f"{target}: {'met' if gain >= margin else 'MISSED'} ({statistics.fmean(mine[1]):.2f} vs "
                         f"{statistics.fmean(theirs[1]):.2f}, {gain:+.2f} points; {len(mine[1])} and "
                         f"{len(theirs[1])} seeds at each one's best learning rate)")  # fmt: skip
    majority = results["floors"].get("rte", {}).get("majority_class_accuracy")
    for side in [] if seq2seq else objectives:
        scores = _scores(results, "rte", side)
        if scores is None or majority is None:
            lines.append(f"rte: {side} above the majority class: not measured, no fine-tuning runs recorded")
            continue
        mean = statistics.fmean(scores[1])
        lines.append(f"rte: {side} above the majority class: {'met' if mean > 100 * majority else 'MISSED'} "
                     f"({mean:.2f} vs {100 * majority:.2f}; {len(scores[1])} seed{'s' * (len(scores[1]) > 1)} at its "
                     "best learning rate)")  # fmt: skip
    return lines


def _pretraining_table(results: dict[str, Any]) -> str:
    rows, first = [], next(iter(results["pretraining"].values()))["config"]["model"]
    for objective, s in results["pretraining"].items():
        model = s["config"]["model"]  # a key the first run set and this one did not: the preset's value, "default"
        unlike = [f"{key} {model.get(key, 'default')}" for key in {**first, **model}
                  if first.get(key) != model.get(key)]  # fmt: skip
        t, final, baseline = s["training"], s["final"], s["baseline"]
        accuracy = final.get("eval_token_accuracy")
        rows.append([
            objective, f"{s['parameters']:,}", t["steps"], f"{t['tokens_seen']:,}", f"{t['loop_wall_s'] / 60:.1f} min",
            f"{t['tokens_per_s_median']:,.0f}", f"{final['perplexity']:.1f}", f"{baseline['unigram_perplexity']:.1f}",
            "-" if accuracy is None else f"{accuracy:.3f}", f"{baseline.get('unigram_accuracy', float('nan')):.3f}",
            ", ".join(unlike) or "-",
            f"{s['config']['learning_rate']:g}, {s['config']['warmup_steps']}, {s['config']['adam_beta2']:g}",
            f"{s['machine']['cpu']}, {s['config']['mixed_precision'] or 'fp32'}",
            f"{s['machine']['load_average_1min']['mean']:.1f}" if s["machine"]["load_average_1min"] else "-",
            _compute(results, objective),
        ])  # fmt: skip
    return markdown_table(["objective", "parameters trained", "steps", "tokens seen", "training loop",
                           "tokens/s (median)", perplexity_name(results), "unigram perplexity", "token accuracy",
                           "unigram accuracy", "model keys unlike the first's", "peak lr, warmup steps, Adam's beta2",
                           "machine, precision", "load",
                           "training FLOPs (vs the first)"], rows)  # fmt: skip


def _discriminator_table(results: dict[str, Any]) -> str:
    """ELECTRA's discriminator loss against a constant guess's (the entropy of the replaced share), at the steps of
    `DISCRIMINATOR_STEPS` and at the end: where the two meet, it tells replaced tokens from originals no better than
    the share alone (logged since commit eb45950: `-` for runs before it)."""
    def cell(point: dict | None) -> str:
        if point is None:
            return ""
        constant = "-" if point["constant_loss"] is None else f"{point['constant_loss']:.3f}"
        return f"{point['loss']:.3f} / {constant}"

    rows = []
    for base, summary in results["pretraining"].items():
        if points := summary.get("discriminator"):
            at = {point["step"]: point for point in points}
            rows.append([base, *(cell(at.get(step)) for step in DISCRIMINATOR_STEPS), cell(points[-1])])
    return markdown_table(["run", *(f"step {step}" for step in DISCRIMINATOR_STEPS), "end"], rows)


def _similarity_section(results: dict[str, Any]) -> list[Section]:
    """Each measured run's `token_similarity` per layer: the sign of an encoder whose positions all look alike."""
    measured = {base: s["token_similarity"] for base, s in results["pretraining"].items() if "token_similarity" in s}
    if not measured:
        return []
    layers = max(len(m["mean_cosine"]) for m in measured.values())
    rows = [[base, *(f"{value:.3f}" for value in m["mean_cosine"])] + [""] * (layers - len(m["mean_cosine"]))
            for base, m in measured.items()]  # fmt: skip
    blocks = sorted({m["blocks"] for m in measured.values()})
    intro = (
        f"Mean cosine between the vectors of two positions of one validation block ({', '.join(map(str, blocks))} "
        "blocks), after the embeddings and after each layer of the pretrained encoder. At 1.000, every position holds "
        "the same vector: the encoder has collapsed, and a tagger fine-tuned from it starts with nothing that tells "
        "one token from another. Measured from the weights when the card first archives a run; runs archived before "
        "(their weights gone) are not listed."
    )
    table = markdown_table(["run", "embeddings", *(f"layer {i}" for i in range(1, layers))], rows)
    return [Section("Token vectors: how alike the positions of a block are", f"{intro}\n\n{table}")]


def _compute(results: dict[str, Any], objective: str) -> str:
    """A run's training FLOPs (its steps x `flops`' count per step) and their ratio to the first objective's."""
    counted = results.get("step_flops", {})
    if objective_of(objective) not in counted:
        return "not counted"
    first = next(iter(results["pretraining"]))
    total = {o: counted[objective_of(o)] * results["pretraining"][o]["training"]["steps"]
             for o in (objective, first) if objective_of(o) in counted}  # fmt: skip
    ratio = f" ({total[objective] / total[first]:.2f}x)" if first in total else ""
    return f"{total[objective]:.3g}{ratio}"


def _finetuning_table(results: dict[str, Any], task: str) -> str:
    metric, rows = TASKS[task][2], []
    for base, rates in results["finetuning"][task].items():
        best = _scores(results, task, base)[0]
        for rate, seeds in sorted(rates.items(), key=lambda item: float(item[0])):
            scores = [100 * run[metric] for run in seeds.values()]
            rows.append([base, rate + (" (best)" if rate == best else ""), f"{statistics.fmean(scores):.2f}",
                         " / ".join(f"{score:.2f}" for score in scores), ", ".join(seeds),
                         f"{statistics.fmean(run['wall_s'] for run in seeds.values()):.0f} s"])  # fmt: skip
    floors = {k: v for k, v in results["floors"][task].items() if isinstance(v, float)}
    rows += [[name.replace("_", " "), "-", f"{100 * value:.2f}", "-", "-", "-"] for name, value in floors.items()]
    return markdown_table(["fine-tuned from", "learning rate", f"mean {metric}", "per seed", "seeds", "mean wall time"],
                          rows)  # fmt: skip


def _timed_curves(results: dict[str, Any], value: str) -> list[Curve]:
    """Each objective's validation `value` against its training-loop minutes, where it was measured."""
    curves = []
    for objective, summary in results["pretraining"].items():
        # the evaluation before the first training log has no time; an encoder-decoder's has no token accuracy
        timed = [p for p in summary["evaluation"] if p["elapsed_s"] is not None and p.get(value) is not None]
        if timed:
            curves.append(Curve([p["elapsed_s"] / 60 for p in timed], [p[value] for p in timed], objective, "o-"))
    return curves


def has_accuracy(results: dict[str, Any]) -> bool:
    """Whether a run measured masked-token accuracy (an encoder-decoder's span corruption does not)."""
    return bool(_timed_curves(results, "token_accuracy"))


def plot_curves(results: dict[str, Any], card_dir: Path) -> None:
    """Each objective's validation perplexity, and its masked-LM token accuracy where measured, against its
    training-loop minutes, with the unigram model's as the floor."""
    baselines = [s["baseline"] for s in results["pretraining"].values()]
    plot_losses(card_dir / CURVES, _timed_curves(results, "perplexity"), xlabel="training loop (minutes)",
                ylabel=f"validation {perplexity_name(results)}",
                baseline=(min(b["unigram_perplexity"] for b in baselines), "unigram perplexity"), dpi=100)  # fmt: skip
    if accuracy := _timed_curves(results, "token_accuracy"):
        plot_losses(card_dir / ACCURACY_CURVES, accuracy, xlabel="training loop (minutes)",
                    ylabel="validation masked-token accuracy", dpi=100,
                    baseline=(max(b["unigram_accuracy"] for b in baselines), "unigram accuracy"))  # fmt: skip
    else:
        (card_dir / ACCURACY_CURVES).unlink(missing_ok=True)  # an earlier card's, of runs no longer in it


def render(results: dict[str, Any], card_command: str) -> str:
    first = next(iter(results["pretraining"].values()))
    kind = "encoder-decoder" if trains_encoder_decoder(results) else "encoder"
    shape = ", ".join(f"{key} {value}" for key, value in first["config"]["model"].items())  # the preset's overrides
    intro = (
        f"`{first['preset']}`{f' ({shape})' if shape else ''} pretrained from scratch on {first['data']['name']} "
        "by `recipes/pretrain.py` with each objective ("
        + ", ".join(f"`{o}` for {s['training']['steps']} steps" for o, s in results["pretraining"].items())
        + "), the same tokenizer, data order, batch and seed, and the model keys and learning-rate schedule the "
        f"pretraining table gives for each; then every pretrained {kind}, and the same "
        f"{kind} from random weights (`scratch`), fine-tuned fully by `recipes/finetune.py` with the same settings "
        "on each task: every learning rate with the first seed, then the other seeds at the best one. Generated by "
        "`model_cards/generate_pretraining_study.py` from the run folders; no number is typed by hand."
    )
    runs = [(f"pretrain-{o}", s["commands"]["run"]) for o, s in results["pretraining"].items()]
    runs += [(f"{task}-{base}-lr{rate}-seed{seed}", run["command"]) for task, bases in results["finetuning"].items()
             for base, rates in bases.items() for rate, seeds in rates.items() for seed, run in seeds.items()]
    commands = "\n".join(command for _, command in runs)
    started = " and ".join(f"`{shlex.join(command)}`" for command in results["commands"])
    accuracy_plot = f"\n\n![validation accuracy]({ACCURACY_CURVES})" if has_accuracy(results) else ""
    sections = [
        Section("Does hfzoo's own pretraining pay?", intro, level=1),
        Section("Verdict", "\n".join(f"- {line}." for line in verdicts(results))),
        Section("Pretraining", _pretraining_table(results) + f"\n\n![validation curves]({CURVES})" + accuracy_plot),
        *([Section("ELECTRA's discriminator: validation loss / a constant guess's", _discriminator_table(results))]
          if any(s.get("discriminator") for s in results["pretraining"].values()) else []),
        *_similarity_section(results),
        *[Section(f"Fine-tuning: {task}", _finetuning_table(results, task)) for task in results["finetuning"]],
        Section("Commands", f"The runs, as recorded (`python`: the virtualenv's):\n\n```bash\n{commands}\n```\n\n"
                + (f"which {started} started.\n\n" if started else "") + _tokenizer_note(results)
                + f"This card:\n\n```bash\n{card_command}\n```"),
    ]  # fmt: skip
    metadata = model_card_data(None, ["hfzoo", first["preset"], *results["pretraining"], "pretraining", "results"])
    return render_card(RunRecord("pretraining-study", {}, summary=results), sections, metadata)


def _tokenizer_note(results: dict[str, Any]) -> str:
    """How the tokenizer every run read was made, and its files' SHA-256 (to check a rebuilt one against)."""
    tokenizer = results.get("tokenizer")
    if tokenizer is None:
        return ""
    made = (f"trained by `{shlex.join(tokenizer['command'])}`" if tokenizer["command"]
            else "made by a command the study did not record")  # fmt: skip
    files = ", ".join(f"`{name}` {file['sha256']}" for name, file in tokenizer["files"].items())
    return f"The tokenizer they read, `{tokenizer['folder']}`, was {made}; its files' SHA-256: {files}.\n\n"


def card_command(runs_dir: str | Path, card_dir: str | Path) -> str:
    """The command that makes the card in `card_dir` (shown as the card shows it)."""
    return shlex.join(["python", "model_cards/generate_pretraining_study.py", "card", shown(str(runs_dir)),
                       shown(str(card_dir))])  # fmt: skip


def card(runs_dir: Path, card_dir: Path) -> Path:
    """README.md, the curves and results.json into `card_dir`, from the runs archived there: those already kept, and
    the finished runs of `runs_dir` (if it is there), which replace their earlier copies."""
    command = card_command(runs_dir, card_dir)
    if runs_dir.is_dir():
        print(f"archived {len(archive(runs_dir, card_dir / ARCHIVE))} finished runs of {shown(str(runs_dir))}")
    else:
        print(f"{shown(str(runs_dir))} is not here: the card is made from the runs archived before")
    results = collect(card_dir / ARCHIVE, command) if (card_dir / ARCHIVE).is_dir() else {"pretraining": {}}
    if not results["pretraining"]:
        raise SystemExit(f"card: no pretraining run in {runs_dir} is finished yet; `run` goes on with them")
    results["runs_dir"] = shown(str(runs_dir))
    kept = shown(str(card_dir / ARCHIVE))
    for run in (run for bases in results["finetuning"].values() for rates in bases.values()
                for seeds in rates.values() for run in seeds.values()):  # fmt: skip
        if run.get("model", "").startswith(kept + "/"):  # the base as the run named it, not its archived records
            run["model"] = results["runs_dir"] + run["model"].removeprefix(kept)
    plot_curves(results, card_dir)
    write_atomic(card_dir / RESULTS, json.dumps(results, indent=1) + "\n")
    return write_atomic(card_dir / CARD, render(results, command))
