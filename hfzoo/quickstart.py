"""`hfzoo quickstart`: the whole hfzoo story on one CPU, with no network, in minutes.

On the embedded default corpus (the installed Python standard library's docstrings) it pretrains a tiny
decoder (causal LM), encoder (masked LM) and encoder-decoder (span corruption), each with a tokenizer trained
on the corpus; fine-tunes two task adapters (LoRA and bottleneck) on two labellings of the same docstrings;
composes them with AdapterFusion and with a learned soft router; compares everything with honest baselines
(unigram perplexity, majority class, the uniform average of the same adapters); reloads
every artefact through the Auto classes (one in a process where hfzoo cannot be imported); and prints a table.
Every step is one of hfzoo's recipes, called exactly as `hfzoo pretrain|finetune|compose` would.
"""

import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import PeftModel
from transformers import (
    AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, AutoTokenizer,
)

from .adapters.peft_warnings import building_peft_model
from .commands import compose, finetune, pretrain
from .core.files import check_output_folder, write_atomic
from .data.default_corpus import load_default_corpus
from .data.stdlib_tasks import write_task_files
from .tasks.baselines import unigram_perplexity
from .training.task_results import METRICS_FILE


@dataclass(frozen=True)
class Scale:
    """Steps per stage: `full` is the tour, long enough for every model to beat its baseline on a laptop CPU;
    `smoke` runs a few steps per stage, enough to prove the wiring."""

    pretrain_steps: int
    finetune_steps: int
    compose_steps: int
    max_train_samples: int | None
    max_eval_samples: int | None


SCALES = {
    "full": Scale(pretrain_steps=400, finetune_steps=300, compose_steps=150, max_train_samples=None, max_eval_samples=None),
    "smoke": Scale(pretrain_steps=4, finetune_steps=4, compose_steps=4, max_train_samples=200, max_eval_samples=40),
}

PRETRAINING = (
    # artefact, preset, objective, Auto class, tokenizer kind
    ("gpt-tiny-clm", "gpt-tiny", "clm", AutoModelForCausalLM, "bpe"),
    # Pre-norm: post-norm BERT sits on the unigram plateau of masked LM far longer than this tour lasts.
    ("modernbert-tiny-mlm", "modernbert-tiny", "mlm", AutoModelForMaskedLM, "wordpiece"),
    ("t5-tiny-span", "t5-tiny", "span_corruption", AutoModelForSeq2SeqLM, "unigram"),
)
# Tiny pre-norm models over a few hundred steps take larger steps than the recipes' defaults, which are set for
# longer runs of larger models.
PRETRAIN_LEARNING_RATE = "1e-3"
ADAPTER_LEARNING_RATE = "2e-3"
ADAPTERS = (("module", "lora"), ("area", "bottleneck"))  # task, method; both on the pretrained encoder
# The LoRA adapter also adapts down_proj, where the (Pfeiffer) bottleneck sits, so the routers and fusion layers
# there weigh two adapters (elsewhere one adapter against the base module's own output).
METHOD_OPTIONS = {"lora": ["--method_options.target_modules", "[qkv_proj, down_proj]"], "bottleneck": []}
# The composition's target task, and the learned strategies trained for it (the first one also trains the
# uniform-average baseline that every learned composition must beat).
COMPOSITION_TASK = "area"
STRATEGIES = ("fusion", "soft")
SUMMARY_FILE = "summary.json"


def _corpus_unigram_perplexity(model_dir: Path, corpus) -> float:
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = {
        split: torch.tensor([t for ids in tokenizer(list(corpus[split]["text"]), add_special_tokens=False)["input_ids"] for t in ids])
        for split in ("train", "validation")
    }
    return unigram_perplexity(ids["train"], ids["validation"], len(tokenizer))


def majority_accuracy(train_file: Path, validation_file: Path) -> float:
    """Accuracy of always predicting the most frequent training label."""
    import csv

    def labels(path: Path) -> list[str]:
        with open(path, newline="", encoding="utf-8") as handle:
            return [row["label"] for row in csv.DictReader(handle)]

    majority = Counter(labels(train_file)).most_common(1)[0][0]
    validation = labels(validation_file)
    return sum(label == majority for label in validation) / len(validation)


def _last_eval(run_dir: Path) -> dict:
    records = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()]
    return [r for r in records if r.get("event") == "eval"][-1]


REMOTE_CODE_CHECK = """
import sys, torch
try:
    import hfzoo
    sys.exit("hfzoo should not be importable here")
except ImportError:
    pass
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
with torch.no_grad():
    print(float((model(torch.load(sys.argv[2])).logits - torch.load(sys.argv[3])).abs().max()))
"""


def check_remote_code(model_dir: Path, model) -> float:
    """Reload `model_dir` in a child process where `import hfzoo` fails; return the max logit difference."""
    with tempfile.TemporaryDirectory() as scratch:
        blocker = Path(scratch, "blocker", "hfzoo")
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text("raise ImportError('hfzoo is blocked in this process')\n")
        ids = torch.arange(1, 17)[None]
        with torch.no_grad():
            torch.save(ids, Path(scratch, "ids.pt"))
            torch.save(model.eval()(ids).logits, Path(scratch, "logits.pt"))
        env = {**os.environ, "PYTHONPATH": str(blocker.parent), "HF_MODULES_CACHE": str(Path(scratch, "modules"))}
        result = subprocess.run(
            [sys.executable, "-c", REMOTE_CODE_CHECK, str(model_dir.resolve()), "ids.pt", "logits.pt"],
            cwd=scratch, env=env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        if result.returncode != 0:
            raise RuntimeError(f"trust_remote_code reload failed:\n{result.stderr[-2000:]}")
        return float(result.stdout.strip().splitlines()[-1])


def _count(model) -> int:
    return sum(p.numel() for p in model.parameters())


def run_quickstart(output_dir: str | os.PathLike = "runs/quickstart", scale: str = "full", seed: int = 0) -> list[dict]:
    if scale not in SCALES:
        raise ValueError(f"Unknown scale {scale!r}; choose one of {', '.join(SCALES)}.")
    steps = SCALES[scale]
    output_dir = Path(output_dir)
    # The tour's folders are its own: an earlier tour there is replaced (its runs overwritten), anything else refused.
    ours = {artefact for artefact, *_ in PRETRAINING} | {f"adapter-{task}-{method}" for task, method in ADAPTERS}
    ours |= {f"compose-{strategy}" for strategy in STRATEGIES} | {"data", SUMMARY_FILE}
    earlier = output_dir.is_dir() and {entry.name for entry in output_dir.iterdir()} <= ours
    check_output_folder(output_dir, "hfzoo quickstart", overwrite=False, reusable=earlier, overwrite_flag=None)
    output_dir.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    rows: list[dict] = []
    shared = ["--overwrite_output_dir", "true"]
    if steps.max_train_samples:
        shared += ["--max_train_samples", str(steps.max_train_samples), "--max_eval_samples", str(steps.max_eval_samples)]

    print("== 1. the embedded default corpus: standard-library docstrings")
    corpus = load_default_corpus()
    print(f"   {len(corpus['train'])} train / {len(corpus['validation'])} validation docstrings")

    print("== 2. pretraining a tiny decoder, encoder and encoder-decoder (a tokenizer trained for each)")
    for artefact, preset, objective, auto_class, tokenizer_kind in PRETRAINING:
        clock = time.perf_counter()
        run_dir = pretrain.main(
            ["--preset", preset, "--objective", objective, "--output_dir", str(output_dir / artefact),
             "--max_steps", str(steps.pretrain_steps), "--tokenizer_kind", tokenizer_kind, "--vocab_size", "4096",
             "--block_size", "128", "--per_device_batch_size", "16", "--learning_rate", PRETRAIN_LEARNING_RATE,
             "--warmup_steps", str(max(1, steps.pretrain_steps // 10)), "--eval_every", str(steps.pretrain_steps),
             "--save_every", str(steps.pretrain_steps), "--tensorboard", "false", "--seed", str(seed), *shared]
        )  # fmt: skip
        model = auto_class.from_pretrained(run_dir)
        evaluation = _last_eval(run_dir)
        rows.append(
            {"artefact": artefact, "what": f"{preset}, {objective}", "parameters": _count(model), "trainable": 1.0,
             "metric": "val perplexity", "value": evaluation["perplexity"],
             "baseline": _corpus_unigram_perplexity(run_dir, corpus), "baseline_name": "unigram",
             "seconds": time.perf_counter() - clock, "path": str(run_dir)}
        )  # fmt: skip

    print("== 3. fine-tuning two task adapters on the pretrained encoder")
    encoder_dir = output_dir / "modernbert-tiny-mlm"
    for task, method in ADAPTERS:
        clock = time.perf_counter()
        files = write_task_files(task, output_dir / "data" / task, corpus)
        run_dir = finetune.main(
            ["--model", str(encoder_dir), "--task", "sequence-classification", "--train_file", str(files["train"]),
             "--validation_file", str(files["validation"]), "--text_column", "text", "--label_column", "label",
             "--method", method, *METHOD_OPTIONS[method], "--learning_rate", ADAPTER_LEARNING_RATE,
             "--max_steps", str(steps.finetune_steps), "--output_dir",
             str(output_dir / f"adapter-{task}-{method}"), "--seed", str(seed), *shared]
        )  # fmt: skip
        metrics = json.loads((run_dir / METRICS_FILE).read_text())
        rows.append(
            {"artefact": f"adapter-{task}-{method}", "what": f"{method} adapter, task '{task}'",
             "parameters": metrics["total_parameters"], "trainable": metrics["trainable_fraction"],
             "metric": "val accuracy", "value": metrics["accuracy"],
             "baseline": majority_accuracy(files["train"], files["validation"]), "baseline_name": "majority",
             "seconds": time.perf_counter() - clock, "path": str(run_dir)}
        )  # fmt: skip

    print(f"== 4. composing both adapters for the '{COMPOSITION_TASK}' task: AdapterFusion and a learned router")
    files = write_task_files(COMPOSITION_TASK, output_dir / "data" / COMPOSITION_TASK, corpus)
    adapters = ",".join(f"{task}={output_dir / f'adapter-{task}-{method}'}" for task, method in ADAPTERS)
    average = None
    for strategy in STRATEGIES:
        clock = time.perf_counter()
        run_dir = compose.main(
            ["--model", str(encoder_dir), "--task", "sequence-classification", "--train_file", str(files["train"]),
             "--validation_file", str(files["validation"]), "--text_column", "text", "--label_column", "label",
             "--adapters", adapters, "--strategy", strategy, "--baseline", str(average is None).lower(),
             "--max_steps", str(steps.compose_steps), "--output_dir", str(output_dir / f"compose-{strategy}"),
             "--seed", str(seed), *shared]
        )  # fmt: skip
        metrics = json.loads((run_dir / METRICS_FILE).read_text())
        if average is None:  # the first strategy trained the baseline
            average = metrics["baselines"]["average"]["accuracy"]
        rows.append(
            {"artefact": f"compose-{strategy}", "what": f"{strategy} over both, task '{COMPOSITION_TASK}'",
             "parameters": metrics["total_parameters"], "trainable": metrics["trainable_fraction"],
             "metric": "val accuracy", "value": metrics["accuracy"], "baseline": average,
             "baseline_name": "average", "seconds": time.perf_counter() - clock, "path": str(run_dir)}
        )  # fmt: skip

    print("== 5. reloading through the Auto classes, and without hfzoo through trust_remote_code")
    for artefact, _, _, auto_class, _ in PRETRAINING:
        auto_class.from_pretrained(output_dir / artefact)
        AutoTokenizer.from_pretrained(output_dir / artefact)
    # Each adapter names its base relative to its own folder (no path of this machine), which PEFT reads from the
    # working directory: so the base is loaded here from its folder, with the head's shape, then the adapter and head.
    for task, method in ADAPTERS:
        adapter_dir = output_dir / f"adapter-{task}-{method}"
        head = json.loads((adapter_dir / METRICS_FILE).read_text())["model_kwargs"]
        head["id2label"] = {int(index): label for index, label in head["id2label"].items()}
        with building_peft_model():
            PeftModel.from_pretrained(AutoModelForSequenceClassification.from_pretrained(encoder_dir, **head), adapter_dir)
    decoder_dir = output_dir / "gpt-tiny-clm"
    remote_diff = check_remote_code(decoder_dir, AutoModelForCausalLM.from_pretrained(decoder_dir))
    tokenizer = AutoTokenizer.from_pretrained(decoder_dir)
    decoder = AutoModelForCausalLM.from_pretrained(decoder_dir)
    prompt = tokenizer("Return the", return_tensors="pt")
    sample = tokenizer.decode(decoder.generate(**prompt, max_new_tokens=20, do_sample=False)[0], skip_special_tokens=True)

    total = time.perf_counter() - started
    summary = {"scale": scale, "rows": rows, "remote_code_max_logit_diff": remote_diff, "sample": sample,
               "seconds": total}  # fmt: skip
    write_atomic(output_dir / SUMMARY_FILE, json.dumps(summary, indent=2))
    print_summary(summary)
    return rows


def print_summary(summary: dict) -> None:
    header = f"{'artefact':<26} {'objective / method':<32} {'params':>9} {'train %':>8} {'metric':<15} {'value':>8} {'baseline':>16} {'time':>6}"
    print("\n" + header + "\n" + "-" * len(header))
    for row in summary["rows"]:
        baseline = f"{row['baseline']:.3f} {row['baseline_name']}"
        print(
            f"{row['artefact']:<26} {row['what']:<32} {row['parameters'] / 1e6:>8.2f}M {100 * row['trainable']:>7.2f}% "
            f"{row['metric']:<15} {row['value']:>8.3f} {baseline:>16} {row['seconds']:>5.0f}s"
        )
    print(f"\nremote code: reloaded without hfzoo, max |logit diff| = {summary['remote_code_max_logit_diff']:.1e}")
    print(f"sample from the decoder: {summary['sample']!r}")
    print(f"total {summary['seconds']:.0f} s; files and model cards under {Path(summary['rows'][0]['path']).parent}")
