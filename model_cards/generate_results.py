"""Result cards for pretraining runs, rebuilt from the run folders: no number in them is typed by hand.

Three subcommands, in the order a result is made:

    # 1. A fixed character split of a plain-text corpus, written under runs/ (ignored by git: third-party data is
    #    never committed); `split.yaml` beside the two files says where they came from.
    python model_cards/generate_results.py split-text ../shared/data/tinyshakespeare/input.txt \
        runs/data/tinyshakespeare

    # 2. A pretraining run of recipes/pretrain.py under `nice -n 10` with the malloc thresholds, recording the exact
    #    command, the machine and its load average (sampled every 15 s) in `run_record.json`, then the unigram
    #    baseline in `baseline.json`. Everything after `--` goes to the recipe unchanged. With `--max_minutes N`
    #    before the run folder (or at SIGTERM) the run stops keeping its checkpoints; the same command continues it.
    python model_cards/generate_results.py record runs/results/gpt-small-clm-tinyshakespeare -- \
        --config recipes/configs/gpt-small-clm.yaml --dataset runs/data/tinyshakespeare --max_steps 150

    # 3. The card: README.md + loss_vs_time.png + results.json (small files only; the weights stay in the run folder).
    python model_cards/generate_results.py card runs/results/gpt-small-clm-tinyshakespeare \
        model_cards/results/gpt-small-clm-tinyshakespeare

The baseline is the floor a trained model must beat: add-one-smoothed unigram frequencies of the objective's
targets, fitted on the training blocks (the run's tokenizer and packing; collator passes until there are as many
targets as training tokens, so masked-LM and span targets are not a sparse sample), and scored on exactly the
validation targets that the run's evaluation scored (same blocks, batches and collator seed; the target count is
checked against the run's own).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import shlex
import shutil
import signal
import statistics
import sys
from pathlib import Path
from typing import Any

import torch
import yaml
from grid_runs import STOPPED_EXIT
from recording import LOAD_SAMPLE_SECONDS, RECORDER_ARGS, REPO_ROOT, RUN_RECORD, Budget, run_complete, run_recorded, shown

from hfzoo.card_writing import (
    CARD, DEFAULT_CORPUS, Curve, RunRecord, Section, architecture_rows, markdown_table, model_card_data, plot_losses,
    render_card, training_data,
)  # fmt: skip
from hfzoo.core.files import write_atomic
from hfzoo.training.checkpointing import latest_checkpoint

BASELINE = "baseline.json"
SPLIT_INFO = "split.yaml"  # beside the split files; not a corpus format, so load_corpus ignores it
DATA_SPLIT = "data_split.yaml"  # its copy in the run folder
CURVE = "loss_vs_time.png"
RESULTS = "results.json"

# ------------------------------------------------------------------------------------------------ split-text
def split_text(source: Path, out_dir: Path, train_fraction: float) -> dict[str, Any]:
    """Write the first `train_fraction` of `source`'s characters to train.jsonl and the rest to validation.jsonl.

    Each file holds one JSON record per paragraph (blank-line separated, inner line breaks kept), so packing puts
    an end-of-text token where the text had a blank line and nothing else of the text is lost. (The corpus
    loader's .txt convention, one example per line, would drop every line break instead.)
    """
    raw = source.read_bytes()
    text = raw.decode("utf-8")
    cut = int(train_fraction * len(text))
    out_dir.mkdir(parents=True, exist_ok=True)
    counts = {}
    for split, part in (("train", text[:cut]), ("validation", text[cut:])):
        paragraphs = [p for p in part.split("\n\n") if p.strip()]
        with (out_dir / f"{split}.jsonl").open("w", encoding="utf-8") as f:
            f.writelines(json.dumps({"text": p}) + "\n" for p in paragraphs)
        counts[split] = {"characters": len(part), "paragraphs": len(paragraphs)}
    info = {
        "source": shown(str(source)),  # relative to the repository: no path of the machine in the card
        "source_sha256": hashlib.sha256(raw).hexdigest(),
        "source_characters": len(text),
        "train_fraction": train_fraction,
        "split": f"train = characters [0, {cut}), validation = characters [{cut}, {len(text)})",
        "format": "JSON Lines, one record per blank-line-separated paragraph (line breaks inside kept)",
        **counts,
    }
    (out_dir / SPLIT_INFO).write_text(yaml.safe_dump(info, sort_keys=False), encoding="utf-8")
    return info


# ------------------------------------------------------------------------------------------------ record








def record(run_dir: Path, recipe_args: list[str], budget: Budget | None = None, device: str | None = None) -> int:
    """Run recipes/pretrain.py with `recipe_args` into `run_dir`, recording command, machine and load; its exit code,
    or `STOPPED_EXIT` when `budget` stopped it. A folder whose run was stopped continues from its latest checkpoint
    with the same arguments (its record sums the segments), or starts over if it stopped before its first one; a
    finished run is refused. `device` (`cpu` or `cuda`) is named in the record, as the recipe's `--cpu` gives it."""
    from hfzoo.commands.pretrain import parse_args

    recipe_args = [*recipe_args, "--output_dir", shown(str(run_dir))]
    config = parse_args(recipe_args)  # the recipe's own parser: a bad key fails here, before anything runs
    if run_complete(run_dir, "model.safetensors"):
        raise SystemExit(f"record: {run_dir} holds a finished run; choose a new folder.")
    checkpoint = latest_checkpoint(run_dir) if run_dir.is_dir() else None
    run_dir.mkdir(parents=True, exist_ok=True)
    if config.data.dataset and (Path(config.data.dataset) / SPLIT_INFO).is_file():
        shutil.copyfile(Path(config.data.dataset) / SPLIT_INFO, run_dir / DATA_SPLIT)
    if checkpoint is not None:
        print(f"{run_dir}: continuing from {checkpoint.name}", flush=True)
    returncode = run_recorded(run_dir, "recipes/pretrain.py", [*recipe_args, *(["--resume", "true"] if checkpoint
                              else [])], budget=budget, device=device, resumed=checkpoint is not None)  # fmt: skip
    if returncode is None:
        print(f"{run_dir}: stopped by the time budget; the same command continues it", flush=True)
        return STOPPED_EXIT
    if returncode == 0:
        unigram_baseline(run_dir)
    return returncode


# ------------------------------------------------------------------------------------------------ baseline
def _targets(blocks, collator, batch_size: int, shifts_labels: bool, max_batches: int | None = None) -> torch.Tensor:
    """The token ids the objective scores in `blocks`, batched and collated as the recipe's evaluation does."""
    from hfzoo.data.collators.common import IGNORE_INDEX

    found = []
    for index, start in enumerate(range(0, len(blocks), batch_size)):
        if max_batches is not None and index >= max_batches:
            break
        labels = collator([blocks[i] for i in range(start, min(start + batch_size, len(blocks)))])["labels"]
        labels = labels[..., 1:] if shifts_labels else labels
        found.append(labels[labels != IGNORE_INDEX])
    return torch.cat(found)


def recorded_config(run_dir: Path) -> Any:
    """A pretraining run's resolved config, as it saved it (`CONFIG_FILE`)."""
    from hfzoo.commands.pretrain import PretrainConfig
    from hfzoo.core.recipe_config import CONFIG_FILE, from_dict, load_yaml

    return from_dict(PretrainConfig, load_yaml(run_dir / CONFIG_FILE))


def recorded_pretraining(run_dir: Path, **data_keys: Any) -> tuple[Any, Any, Any, tuple[Any, Any]]:
    """A finished pretraining run's config (`recorded_config`), objective, tokenizer and its training and validation
    texts, read as the run read them (`data_keys` override its data keys: `streaming=True` and a `max_eval_samples`
    for measures that need only the first validation texts)."""
    from dataclasses import replace

    from transformers import AutoTokenizer

    from hfzoo.commands.pretrain import corpus_texts
    from hfzoo.objectives.objective import get_objective

    config = recorded_config(run_dir)
    objective = get_objective(config.objective, config.preset)
    tokenizer = AutoTokenizer.from_pretrained(config.data.tokenizer or run_dir)
    return config, objective, tokenizer, corpus_texts(replace(config.data, **data_keys), config.run.seed)


def unigram_baseline(run_dir: Path) -> dict[str, Any]:
    """Unigram perplexity on the run's validation targets (see the module docstring), and the accuracy of always
    predicting the most frequent fitted target; written to baseline.json."""
    from hfzoo.tasks.baselines import unigram_accuracy, unigram_perplexity
    from hfzoo.training.logging import read_log

    config, objective, tokenizer, texts = recorded_pretraining(run_dir, streaming=False)
    splits = {  # the recipe's examples: blocks or pairs
        name: objective.examples(split, tokenizer, config.data.block_size)
        for name, split in zip(("train", "validation"), texts)
    }

    def collator(generator: torch.Generator):
        return objective.make_collator(tokenizer, config.collator, generator)

    batch = config.training.per_device_batch_size
    validation = _targets(
        splits["validation"], collator(torch.Generator().manual_seed(config.run.seed)), batch,
        objective.shifts_labels, config.training.eval_batches,
    )  # fmt: skip
    train_tokens = len(splits["train"]) * config.data.block_size
    fit_collator, fitted, passes = collator(torch.Generator().manual_seed(config.run.seed)), [], 0
    while sum(len(t) for t in fitted) < train_tokens:
        fitted.append(_targets(splits["train"], fit_collator, batch, objective.shifts_labels))
        passes += 1
    scored = [r for r in read_log(run_dir) if r["event"] == "eval"]
    if scored and scored[-1]["eval_targets"] != len(validation):
        raise RuntimeError(
            f"{run_dir}: the baseline found {len(validation)} validation targets, the run scored "
            f"{scored[-1]['eval_targets']}; the data or collator differ from the run's"
        )
    fitted = torch.cat(fitted)
    perplexity = unigram_perplexity(fitted, validation, len(tokenizer))
    baseline = {
        "unigram_perplexity": perplexity,
        "unigram_loss": math.log(perplexity),
        "unigram_accuracy": unigram_accuracy(fitted, validation, len(tokenizer)),
        "smoothing": "add-one",
        "vocab_size": len(tokenizer),
        "fit_targets": fitted.numel(),
        "fit_collator_passes": passes,
        "validation_targets": len(validation),
    }
    (run_dir / BASELINE).write_text(json.dumps(baseline, indent=1), encoding="utf-8")
    return baseline


# ------------------------------------------------------------------------------------------------ card
def summarize(run_dir: Path, card_command: str) -> dict[str, Any]:
    """Everything the card shows, from the run folder's files (log, configs, run record, baseline)."""
    from hfzoo.data.default_corpus import VALIDATION_PERCENT
    from hfzoo.training.logging import read_log
    from hfzoo.objectives.objective import get_objective

    records = read_log(run_dir)
    start = next(r for r in records if r["event"] == "start")
    end = next(r for r in records if r["event"] == "end")
    train = [r for r in records if r["event"] == "train"]
    config = start["config"]
    objective = get_objective(config["objective"], config["preset"])
    run = json.loads((run_dir / RUN_RECORD).read_text()) if (run_dir / RUN_RECORD).exists() else {}
    baseline = json.loads((run_dir / BASELINE).read_text()) if (run_dir / BASELINE).exists() else None
    baseline = baseline or unigram_baseline(run_dir)
    model_config = json.loads((run_dir / "config.json").read_text())

    def at(step: int) -> dict:  # the train record logged at (or just before) an evaluation
        return max((r for r in train if r["step"] <= step), key=lambda r: r["step"], default={})

    curve = [
        {"step": r["step"], "elapsed_s": at(r["step"]).get("elapsed"), "tokens_seen": at(r["step"]).get("tokens_seen"),
         "eval_loss": r["eval_loss"], "perplexity": r["perplexity"], "token_accuracy": r.get("eval_token_accuracy")}
        for r in records if r["event"] == "eval"
    ]  # fmt: skip
    commands = {"data": None, "record": None, "run": run.get("command"), "card": card_command}
    if run.get("command"):  # `record` appended `--output_dir RUN_DIR` to the arguments it was given
        words = shlex.split(run["command"])
        first = words.index("recipes/pretrain.py") + 1
        first += len(RECORDER_ARGS) if tuple(words[first : first + len(RECORDER_ARGS)]) == RECORDER_ARGS else 0
        recipe_args = words[first:-2]  # without the recorder's own arguments
        commands["record"] = shlex.join(["python", Path(__file__).relative_to(REPO_ROOT).as_posix(), "record",
                                         words[-1], "--", *recipe_args])  # fmt: skip
    if (run_dir / DATA_SPLIT).exists():
        split = yaml.safe_load((run_dir / DATA_SPLIT).read_text())
        data = {"name": Path(split["source"]).parent.name, **split}
        commands["data"] = shlex.join(["python", "model_cards/generate_results.py", "split-text", split["source"],
                                       config["dataset"], "--train-fraction", str(split["train_fraction"])])
    elif config["dataset"] is None and config["data_files"] is None:
        python = run.get("machine", {}).get("python", "?")  # the default corpus is this Python's stdlib
        data = {"name": DEFAULT_CORPUS, "split": f"the corpus's own validation split (~{VALIDATION_PERCENT}% of "
                f"docstrings, by a hash of each text); Python {python} stdlib"}  # fmt: skip
    else:
        data = {"name": str(config["dataset"] or config["data_files"]), "split": "as given by the corpus loader"}
    speeds = [r["tokens_per_s"] for r in train]
    loads = [s[1] for s in run.get("load_average_samples", [])]
    return {
        "name": run_dir.name,
        "preset": config["preset"],
        "objective": objective.name,
        "task": objective.task_name,
        "pipeline_tag": objective.pipeline_tag,
        "parameters": start["parameters"],
        "architecture": dict(architecture_rows(model_config)),
        "data": {**data, "train_blocks": start["train_blocks"], "validation_blocks": start["eval_blocks"],
                 "block_size": config["block_size"]},  # fmt: skip
        "commands": commands,
        "config": config,
        "training": {
            "steps": end["step"],
            "tokens_per_step": start["tokens_per_step"],
            "tokens_seen": end["tokens_seen"],
            "loop_wall_s": end["elapsed"],
            "process_wall_s": run.get("process_wall_s"),
            "tokens_per_s_median": statistics.median(speeds),
            "tokens_per_s_range": [min(speeds), max(speeds)],
            "tokens_per_s_including_eval": end["tokens_seen"] / end["elapsed"],
            "final_train_loss": train[-1]["loss"],
        },
        "evaluation": curve,
        "final": {key: end.get(key) for key in ("eval_loss", "perplexity", "eval_targets", "eval_token_accuracy")},
        "baseline": baseline,
        "machine": {
            **run.get("machine", {}),
            "device": start["device"],
            "started": run.get("started"),
            "git": run.get("git"),
            "load_average_1min": {"mean": statistics.fmean(loads), "min": min(loads), "max": max(loads),
                                  "samples": len(loads), "every_s": LOAD_SAMPLE_SECONDS} if loads else None,
        },  # fmt: skip
    }


def plot(summary: dict[str, Any], records: list[dict[str, Any]], path: Path) -> None:
    """Validation (and training) loss against wall time, with the unigram baseline as a dashed line."""
    train = [r for r in records if r["event"] == "train"]
    curve = summary["evaluation"]
    plot_losses(
        path,
        [Curve([r["elapsed"] / 60 for r in train], [r["loss"] for r in train], "train loss", alpha=0.5),
         Curve([p["elapsed_s"] / 60 for p in curve], [p["eval_loss"] for p in curve], "validation loss", "o-")],
        xlabel="wall time of the training loop (minutes)", ylabel="loss (nats per target token)",
        title=f"{summary['preset']} · {summary['objective']} · {summary['data']['name']}",
        baseline=(summary["baseline"]["unigram_loss"], "unigram baseline (validation)"), dpi=100,
    )  # fmt: skip


def _load_text(machine: dict[str, Any]) -> str:
    load = machine.get("load_average_1min")
    if not load:
        return "not recorded"
    return (f"1-minute load average during the run: mean {load['mean']:.2f}, min {load['min']:.2f}, max "
            f"{load['max']:.2f} ({load['samples']} samples, every {load['every_s']} s), on {machine['cores']} cores")


def _intro(record: RunRecord) -> str:
    s, b, final = record.summary, record.summary["baseline"], record.summary["final"]
    verdict = "beats" if final["perplexity"] < b["unigram_perplexity"] else "does NOT beat"
    return (f"`{s['preset']}` ({s['parameters']:,} parameters) pretrained from scratch by hfzoo's recipe on "
            f"{s['task'].lower()}, {s['data']['name']}. The model {verdict} the unigram baseline: validation "
            f"perplexity {final['perplexity']:.2f} vs {b['unigram_perplexity']:.2f}. Generated by "
            "`model_cards/generate_results.py` from the run's files; the weights are not in this folder.")  # fmt: skip


def _result(record: RunRecord) -> str:
    from hfzoo.objectives.objective import OBJECTIVES

    s, t, b, final = record.summary, record.summary["training"], record.summary["baseline"], record.summary["final"]
    return markdown_table(["", "value"], [
        ["final validation loss (nats/target token)", f"{final['eval_loss']:.4f}"],
        ["final validation perplexity", f"{final['perplexity']:.2f}"],
        ["unigram baseline perplexity (same split, tokenizer, targets)", f"{b['unigram_perplexity']:.2f}"],
        ["unigram baseline loss", f"{b['unigram_loss']:.4f}"],
        ["validation targets scored", f"{final['eval_targets']:,} ({OBJECTIVES[s['objective']].scored_targets})"],
        ["optimizer steps", t["steps"]],
        ["tokens seen (model inputs, padding excluded)",
         f"{t['tokens_seen']:,} ({t['tokens_seen'] / t['steps']:,.0f} per step, from {t['tokens_per_step']:,} corpus "
         "tokens per step)"],
        ["wall time, training loop (evaluations included)", f"{t['loop_wall_s']:.0f} s"],
        ["wall time, whole process (corpus, tokenizer, packing, save)",
         f"{t['process_wall_s']:.0f} s" if t["process_wall_s"] else "not recorded"],
        ["training throughput, median of log intervals (evaluation excluded)",
         f"{t['tokens_per_s_median']:,.0f} tokens/s"],
        ["training throughput, range of log intervals",
         "{:,.0f} - {:,.0f} tokens/s".format(*t["tokens_per_s_range"])],
        ["throughput over the whole loop (evaluations included)", f"{t['tokens_per_s_including_eval']:,.0f} tokens/s"],
        ["final training loss (last log interval)", f"{t['final_train_loss']:.4f}"],
    ])  # fmt: skip


def _curve(record: RunRecord) -> str:
    rows = [[p["step"], f"{p['elapsed_s']:.0f}", f"{p['tokens_seen']:,}", f"{p['eval_loss']:.4f}",
             f"{p['perplexity']:.2f}"] for p in record.summary["evaluation"]]  # fmt: skip
    headers = ["step", "wall time of the loop (s)", "tokens seen", "validation loss", "perplexity"]
    return markdown_table(headers, rows) + f"\n\n![validation loss against wall time]({CURVE})"


def _baseline(record: RunRecord) -> str:
    b = record.summary["baseline"]
    return ("Add-one-smoothed unigram frequencies of the objective's targets, fitted on the training blocks "
            f"({b['fit_targets']:,} targets, {b['fit_collator_passes']} collator pass(es)) and scored on the same "
            f"{b['validation_targets']:,} validation targets as the model (vocabulary {b['vocab_size']:,}).")


def _data(record: RunRecord) -> str:
    data = record.summary["data"]
    rows = [[key, data[key]] for key in ("name", "source", "source_sha256", "split", "format") if key in data]
    rows += [["packed blocks", f"{data['train_blocks']:,} train / {data['validation_blocks']:,} validation "
              f"x {data['block_size']} tokens"]]  # fmt: skip
    return markdown_table(["", "value"], rows)


def _commands(record: RunRecord) -> str:
    commands = record.summary["commands"]
    return ((f"The split files, written at run time outside the repository:\n\n```bash\n{commands['data']}\n```\n\n"
             if commands["data"] else "")
            + f"The run, as typed (`python`: the virtualenv's):\n\n```bash\n{commands['record']}\n```\n\n"
            "which ran this, sampling the load meanwhile:\n\n"
            f"```bash\n{commands['run']}\n```\n\nThis card:\n\n```bash\n{commands['card']}\n```")  # fmt: skip


def _settings(record: RunRecord) -> str:
    config = record.config
    settings = ["per_device_batch_size", "gradient_accumulation_steps", "block_size", "learning_rate", "warmup_steps",
                "min_lr_ratio", "weight_decay", "adam_beta2", "max_steps", "eval_every", "tokenizer_kind",
                "vocab_size", "collator", "seed"]  # fmt: skip
    architecture = ", ".join(f"{k}={v}" for k, v in record.summary["architecture"].items())
    table = markdown_table(["key", "value"], [[k, f"`{config[k]}`"] for k in settings])
    return f"{table}\n\nArchitecture: {architecture}."


def _machine_table(record: RunRecord) -> str:
    m = record.summary["machine"]
    return markdown_table(["", "value"], [
        ["machine", f"{m.get('cpu', '?')}, {m.get('cores', '?')} cores, {m.get('memory_gib', '?')} GiB, "
                    f"device {m['device']}"],
        ["load", _load_text(m)],
        ["software", f"Python {m.get('python', '?')}, torch {m.get('torch', '?')}"],
        ["code", f"commit {m['git']['commit'][:12]}; uncommitted at the time: "
                 f"{', '.join(m['git']['uncommitted']) or 'none'}" if m.get("git") else "not recorded"],
        ["started", m.get("started") or "not recorded"],
    ])  # fmt: skip


def render(summary: dict[str, Any]) -> str:
    """The card's Markdown, with Hub metadata (model-index: validation loss and perplexity) as front matter."""
    s, final = summary, summary["final"]
    _, dataset_type, datasets = training_data(RunRecord(s["name"], s["config"]))  # a Hub id, else no local path
    metadata = model_card_data(
        s["name"], ["hfzoo", s["preset"], s["objective"], "pretraining", "results"], pipeline_tag=s["pipeline_tag"],
        task_name=s["task"], dataset=(dataset_type, s["data"]["name"]), datasets=datasets,
        metrics=[("loss", "Validation loss", round(final["eval_loss"], 4)),
                 ("perplexity", "Perplexity", round(final["perplexity"], 3))],
    )  # fmt: skip
    contention = Section(None, f"Throughput was measured on a shared machine ({_load_text(s['machine'])}); under "
                         "that contention tokens/s is a lower bound for this code on this CPU.")
    sections = [
        Section(s["name"], _intro, level=1), Section("Result", _result), contention,
        Section("Validation loss against wall time", _curve), Section("Baseline", _baseline), Section("Data", _data),
        Section("Commands", _commands), Section("Settings", _settings), Section("Machine", _machine_table),
    ]  # fmt: skip
    return render_card(RunRecord(s["name"], s["config"], summary=summary), sections, metadata)


def card(run_dir: Path, card_dir: Path) -> Path:
    """Write README.md, the loss-vs-time PNG and results.json for the finished run in `run_dir` into `card_dir`."""
    from hfzoo.training.logging import read_log

    card_command = shlex.join(["python", "model_cards/generate_results.py", "card", shown(str(run_dir)),
                               shown(str(card_dir))])  # fmt: skip
    summary = summarize(run_dir, card_command)
    card_dir.mkdir(parents=True, exist_ok=True)
    plot(summary, read_log(run_dir), card_dir / CURVE)
    write_atomic(card_dir / RESULTS, json.dumps(summary, indent=1) + "\n")
    return write_atomic(card_dir / CARD, render(summary))


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    split = commands.add_parser("split-text", help="fixed character split of a text file into train/validation")
    split.add_argument("source", type=Path)
    split.add_argument("out_dir", type=Path)
    split.add_argument("--train-fraction", type=float, default=0.9)
    run = commands.add_parser("record", help="run recipes/pretrain.py, recording command, machine, load, baseline")
    run.add_argument("run_dir", type=Path)
    run.add_argument("--max_minutes", type=float, help="stop the run after this many minutes (or at SIGTERM), keeping "
                     "its checkpoints; the same command continues it")  # fmt: skip
    run.add_argument("recipe_args", nargs=argparse.REMAINDER, help="after --: the recipe's arguments")
    make = commands.add_parser("card", help="README.md, PNG and results.json from a finished run folder")
    make.add_argument("run_dir", type=Path)
    make.add_argument("card_dir", type=Path)
    args = parser.parse_args(argv)
    if args.command == "split-text":
        print(yaml.safe_dump(split_text(args.source, args.out_dir, args.train_fraction), sort_keys=False))
        return
    run_dir = args.run_dir.resolve()
    card_dir = args.card_dir.resolve() if args.command == "card" else None
    os.chdir(REPO_ROOT)  # the recipe runs in the repository root, so its relative paths are read from there
    if args.command == "record":
        recipe_args = args.recipe_args[1:] if args.recipe_args[:1] == ["--"] else args.recipe_args
        budget = Budget(args.max_minutes)
        for stop in (signal.SIGTERM, signal.SIGINT):
            signal.signal(stop, budget.stop)
        sys.exit(record(run_dir, recipe_args, budget))
    print(card(run_dir, card_dir))


if __name__ == "__main__":
    main()
