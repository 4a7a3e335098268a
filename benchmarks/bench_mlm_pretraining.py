"""hfzoo's masked-LM pretraining recipe side by side with transformers' own way, on real Wikipedia text: a change that
makes hfzoo's masked LM learn less, or learn slower, shows here.

hfzoo: `recipes/pretrain.py --preset bert-small --objective mlm` as users run it, at the settings of
`recipes/configs/bert-small-enwiki-mlm.yaml` (a 4-layer x 256 BERT, blocks of 128 tokens, batches of 32, AdamW at
1e-3 with beta2 0.98 and weight decay 0.01, warmup over 10% of the steps, then cosine decay to 10% of the peak,
gradient clipping at 1.0). transformers: `BertForMaskedLM` of the same shape, built from the same preset config by
`hfzoo.convert.native_model` (the parameter counts are asserted equal), trained by `transformers.Trainer` with the
same optimisation (`lr_scheduler_type="cosine_with_min_lr"`), masked by `DataCollatorForLanguageModeling` (15%).
Both read the same texts: the first `--train-articles` training and `--validation-articles` validation articles of
the WikiExtractor corpus in ../shared/data/enwiki (`hfzoo.data.corpus.load_corpus`: validation held out by article),
written once as `train.jsonl` and `validation.jsonl`, packed into the same blocks by `hfzoo.data.packing.pack` with
the same tokenizer (`--tokenizer`, else a WordPiece one that hfzoo's tokenizer training fits to the training texts).
Both evaluate at the same steps on the same first `--eval-batches` x 32 validation blocks.

What each side does its own way, as its users get it: hfzoo masks exactly 15% of each block's tokens and projects
only the masked positions onto the vocabulary; the collator of transformers flips a coin per token and the model
projects every position. hfzoo's validation loss is the mean over the masked tokens with the same masks at every
evaluation; Trainer's is the mean of its batches' losses, masked afresh each time.

Each side runs in its own process, both at once, each on `--threads` threads (one by default: the two cores each
take one side), so a slow minute of the shared machine slows both. Reported: the curve of validation masked-LM loss
against steps and against training seconds, the final loss, the seconds of the training loop (evaluations included:
the recipe log's `elapsed`, Trainer's `train_runtime`) and the wall time of each process (start to exit: imports,
packing, training, evaluations; the recipe also saves its model). Ratios: final loss hfzoo / native (<= 1 favours
hfzoo), time native / hfzoo (a speed ratio, > 1 favours hfzoo, as the other benchmarks).

    python benchmarks/bench_mlm_pretraining.py          # the full run: 2,000 steps
    python benchmarks/bench_mlm_pretraining.py --tiny   # 4 steps of a 2-layer x 64 encoder on 20 articles (the test)

The full run trains on 71,917 blocks (2,500 articles: 0.9 of an epoch) and evaluates on 512 of 1,994 validation
blocks: 82 minutes of wall time on two quiet cores (2026-12-07, Intel Xeon: the recipe's process 46 minutes, the
Trainer's 81), the slower side setting the length.
"""

import argparse
import json
import math
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from transformers import (
    AutoTokenizer, DataCollatorForLanguageModeling, Trainer, TrainerCallback, TrainingArguments, set_seed,
)  # fmt: skip

import hfzoo
from hfzoo.card_writing.render import Curve, plot_losses
from hfzoo.convert import native_model
from hfzoo.data.corpus import load_corpus
from hfzoo.data.packing import pack
from hfzoo.data.tokenizer_training import train_tokenizer

from common import (
    MALLOC_SETTINGS,
    REPO_ROOT,
    RESULTS_DIR,
    SHARED_DIR,
    ensure_malloc_setting,
    environment,
    parameter_count,
    shown_path,
    write_json,
)
from recipe_runs import read_run, recipe_command

DATA = SHARED_DIR / "data" / "enwiki"
MODEL = {"hidden_size": 256, "num_hidden_layers": 4, "num_attention_heads": 4, "intermediate_size": 1024}
TINY_MODEL = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 2, "intermediate_size": 256}
# The recipe's config keys both sides train with (bert-small-enwiki-mlm.yaml's), beside the run length and seed.
RECIPE = {
    "preset": "bert-small", "objective": "mlm", "collator": {"mlm_probability": 0.15}, "block_size": 128,
    "learning_rate": 1e-3, "weight_decay": 0.01, "adam_beta1": 0.9, "adam_beta2": 0.98, "adam_epsilon": 1e-8,
    "min_lr_ratio": 0.1, "max_grad_norm": 1.0, "tensorboard": False,
}  # fmt: skip
WARMUP_FRACTION = 0.1
TINY = ["--train-articles", "20", "--validation-articles", "5", "--vocab-size", "512",
        "--model", json.dumps(TINY_MODEL), "--max-steps", "4", "--eval-every", "2", "--eval-batches", "1"]  # fmt: skip
PATH_FLAGS = ("--data", "--tokenizer", "--output")
TARGETS = {"final_loss": {"at_most": 1.0}, "loop_speed": {"at_least": 1.0}}  # the ratios of `compare`


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data", type=Path, default=DATA, help="WikiExtractor folder (../shared/data/enwiki)")
    parser.add_argument("--train-articles", type=int, default=2500, help="first training articles to train on")
    parser.add_argument("--validation-articles", type=int, default=50, help="first validation articles to pack")
    parser.add_argument("--tokenizer", type=Path, help="tokenizer folder; default: WordPiece trained on the texts")
    parser.add_argument("--vocab-size", type=int, default=16384, help="vocabulary of the trained tokenizer")
    parser.add_argument("--model", type=json.loads, default=MODEL, help="bert-small's config overrides (JSON)")
    parser.add_argument("--batch-size", type=int, default=32, help="blocks per optimizer step")
    parser.add_argument("--max-steps", type=int, default=2000)
    parser.add_argument("--eval-every", type=int, default=200, help="steps between evaluations (and at the end)")
    parser.add_argument("--eval-batches", type=int, default=16, help="validation batches per evaluation")
    parser.add_argument("--seed", type=int, default=42)
    parser.add_argument("--threads", type=int, default=1, help="threads of each side (both sides run at once)")
    parser.add_argument("--malloc", choices=MALLOC_SETTINGS, default="tuned",
                        help="glibc malloc thresholds to run under (the script re-executes itself to apply them)")
    parser.add_argument("--tiny", action="store_true", help=f"a smoke test: {' '.join(TINY)}")
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "mlm_pretraining.json")
    parser.add_argument("--native-worker", type=Path, help=argparse.SUPPRESS)  # the native side, in its own process
    args = parser.parse_args(argv)
    return parser.parse_args([*TINY, *argv]) if args.tiny else args


def recipe_settings(args: argparse.Namespace) -> dict:
    """Every recipe config key of the run; the native side reads its settings from the same dict."""
    # log_every divides eval_every: the step of each evaluation has a train record, which holds its seconds.
    return {
        **RECIPE, "model": args.model, "per_device_batch_size": args.batch_size, "max_steps": args.max_steps,
        "warmup_steps": round(WARMUP_FRACTION * args.max_steps), "eval_every": args.eval_every,
        "eval_batches": args.eval_batches, "log_every": math.gcd(10, args.eval_every), "seed": args.seed,
    }  # fmt: skip


def write_corpus(args: argparse.Namespace, folder: Path) -> dict[str, list[str]]:
    """The first articles of each split as `train.jsonl` and `validation.jsonl` in `folder`; returns the texts.
    Read lazily: the articles come in the order, and with the split, of a full load."""
    corpus = load_corpus(args.data, streaming=True)
    texts = {}
    for split, count in (("train", args.train_articles), ("validation", args.validation_articles)):
        texts[split] = [example["text"] for example in corpus[split].take(count)]
        lines = "".join(json.dumps({"text": text}) + "\n" for text in texts[split])
        (folder / f"{split}.jsonl").write_text(lines, encoding="utf-8")
    return texts


def save_tokenizer(args: argparse.Namespace, train_texts: list[str], folder: Path) -> int:
    """The tokenizer both sides use, saved in `folder`: `--tokenizer`, or WordPiece trained on the training texts with
    BERT's special tokens. Returns its vocabulary size."""
    if args.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(args.tokenizer)
    else:
        tokenizer = train_tokenizer(train_texts, "wordpiece", args.vocab_size, "encoder")
    tokenizer.save_pretrained(folder)
    return len(tokenizer)


def timed(command: list[str], env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    start = time.perf_counter()
    completed = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True)
    return completed, time.perf_counter() - start


def run_both(settings: dict, work: Path, threads: int) -> dict[str, tuple[subprocess.CompletedProcess, float]]:
    """The recipe and the native worker, started together; each one's completed process and wall seconds."""
    # One OpenMP thread pool of `threads` and no tokenizer threads per side; this checkout's hfzoo; the packed blocks
    # cached in the work folder (deleted with it), not in ~/.cache.
    env = {
        **os.environ, "OMP_NUM_THREADS": str(threads), "TOKENIZERS_PARALLELISM": "false", "HF_HUB_OFFLINE": "1",
        "PYTHONPATH": str(REPO_ROOT), "HF_DATASETS_CACHE": str(work / "datasets-cache"),
    }  # fmt: skip
    commands = {
        "hfzoo": [*recipe_command(settings, work / "data", work / "hfzoo"), "--tokenizer", str(work / "tokenizer")],
        "native": [sys.executable, str(Path(__file__).resolve()), "--native-worker", str(work)],
    }
    with ThreadPoolExecutor(len(commands)) as pool:
        futures = {side: pool.submit(timed, command, env) for side, command in commands.items()}
        return {side: future.result() for side, future in futures.items()}


class StepClock(TrainerCallback):
    """Seconds since training began at the end of each step, before its evaluation: the recipe log's `elapsed`."""

    def __init__(self) -> None:
        self.seconds: dict[int, float] = {}

    def on_train_begin(self, args, state, control, **kwargs) -> None:
        self.start = time.perf_counter()

    def on_step_end(self, args, state, control, **kwargs) -> None:
        self.seconds[state.global_step] = time.perf_counter() - self.start


def native_worker(work: Path) -> None:
    """The native side, in its own process: `BertForMaskedLM` of the recipe's shape trained by `Trainer` on the
    recipe's blocks, evaluated on its first validation blocks at its steps; writes `native.json` in `work`."""
    settings = json.loads((work / "settings.json").read_text())
    batch_size, block_size = settings["per_device_batch_size"], settings["block_size"]
    tokenizer = AutoTokenizer.from_pretrained(work / "tokenizer")
    corpus = load_corpus(work / "data")
    train_blocks = pack(corpus["train"], tokenizer, block_size)
    eval_blocks = pack(corpus["validation"], tokenizer, block_size)
    eval_blocks = eval_blocks.select(range(min(len(eval_blocks), settings["eval_batches"] * batch_size)))
    config = hfzoo.preset_config(settings["preset"], vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                                 **settings["model"])  # fmt: skip
    set_seed(settings["seed"])
    model = native_model(config, "BertForMaskedLM")
    arguments = TrainingArguments(
        output_dir=str(work / "native"), max_steps=settings["max_steps"], per_device_train_batch_size=batch_size,
        per_device_eval_batch_size=batch_size, learning_rate=settings["learning_rate"],
        weight_decay=settings["weight_decay"], adam_beta1=settings["adam_beta1"], adam_beta2=settings["adam_beta2"],
        adam_epsilon=settings["adam_epsilon"], max_grad_norm=settings["max_grad_norm"],
        warmup_steps=settings["warmup_steps"], lr_scheduler_type="cosine_with_min_lr",
        lr_scheduler_kwargs={"min_lr_rate": settings["min_lr_ratio"]}, eval_strategy="steps",
        eval_steps=settings["eval_every"], logging_steps=settings["log_every"], save_strategy="no", report_to="none",
        seed=settings["seed"], use_cpu=True, dataloader_drop_last=True, disable_tqdm=True,
    )  # fmt: skip
    collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=settings["collator"]["mlm_probability"])
    clock = StepClock()
    trainer = Trainer(model=model, args=arguments, data_collator=collator, train_dataset=train_blocks,
                      eval_dataset=eval_blocks, processing_class=tokenizer, callbacks=[clock])  # fmt: skip
    trained = trainer.train()
    curve = [{"step": record["step"], "train_s": round(clock.seconds[record["step"]], 3),
              "validation_loss": record["eval_loss"]} for record in trainer.state.log_history if "eval_loss" in record]
    result = {
        "validation_loss": curve[-1]["validation_loss"], "train_s": trained.metrics["train_runtime"],
        "steps": trainer.state.global_step, "parameters": parameter_count(model), "native_class": type(model).__name__,
        "train_blocks": len(train_blocks), "curve": curve,
    }  # fmt: skip
    (work / "native.json").write_text(json.dumps(result))


def compare(runs: dict[str, dict]) -> dict[str, float]:
    """Final loss hfzoo / native (<= 1 favours hfzoo); loop and process time native / hfzoo (> 1 favours hfzoo)."""
    hfzoo_run, native_run = runs["hfzoo"], runs["native"]
    return {
        "final_loss": hfzoo_run["validation_loss"] / native_run["validation_loss"],
        "loop_speed": native_run["train_s"] / hfzoo_run["train_s"],
        "process_speed": native_run["wall_s"] / hfzoo_run["wall_s"],
    }


def plot(path: Path, runs: dict[str, dict], title: str) -> Path:
    """Both validation curves against training seconds and, beside them, against steps."""
    style = {"hfzoo": ("hfzoo's recipe", "o-"), "native": ("BertForMaskedLM + Trainer", "s--")}

    def curves(x: str) -> list[Curve]:
        return [Curve([point[x] for point in run["curve"]], [point["validation_loss"] for point in run["curve"]],
                      *style[side]) for side, run in runs.items()]  # fmt: skip

    return plot_losses(path, curves("train_s"), xlabel="training seconds (evaluations included)",
                       ylabel="validation masked-LM loss (nats/token)", title=title,
                       beside=(curves("step"), "optimizer step"))  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    given = argv if argv is not None else sys.argv[1:]
    args = parse_args(given)
    if args.native_worker:
        native_worker(args.native_worker)
        return 0
    if not args.data.is_dir():
        sys.exit(f"{args.data} not found: the WikiExtractor enwiki folder of ../shared/data")
    ensure_malloc_setting(args.malloc)  # the two processes inherit it
    started = {**environment(), "torch_threads": args.threads}  # per side
    settings = recipe_settings(args)
    config = hfzoo.preset_config(settings["preset"], **settings["model"])
    model_name = f"{settings['preset']} ({config.num_hidden_layers} layers x {config.hidden_size})"
    with tempfile.TemporaryDirectory(prefix="bench-mlm-") as scratch:
        work = Path(scratch)
        (work / "data").mkdir()
        texts = write_corpus(args, work / "data")
        vocab_size = save_tokenizer(args, texts["train"], work / "tokenizer")
        (work / "settings.json").write_text(json.dumps(settings))
        finished = run_both(settings, work, args.threads)
        for side, (completed, _) in finished.items():
            if completed.returncode != 0:
                sys.stderr.write(f"{side} side failed:\n{completed.stderr[-5000:]}")
                return completed.returncode
        runs = {"hfzoo": read_run(work / "hfzoo"), "native": json.loads((work / "native.json").read_text())}
    for side, (_, wall_s) in finished.items():
        runs[side]["wall_s"] = wall_s
    parameters = {side: runs[side].pop("parameters") for side in runs}
    if parameters["hfzoo"] != parameters["native"]:
        raise AssertionError(f"hfzoo's model and its native twin differ in size: {parameters}")
    blocks = {side: run["train_blocks"] for side, run in runs.items()}
    if blocks["hfzoo"] != blocks["native"]:
        raise AssertionError(f"the two sides packed different numbers of training blocks: {blocks}")
    started["load_average_end"] = os.getloadavg()
    ratios = compare(runs)
    shown = [shown_path(Path(value)) if before in PATH_FLAGS else value for before, value in zip(["", *given], given)]
    shown = [f"{flag}={shown_path(Path(path))}" if sep and flag in PATH_FLAGS else value
             for value in shown for flag, sep, path in [value.partition("=")]]  # the --flag=path form too
    payload = {
        "benchmark": "mlm_pretraining",
        "command": shlex.join(["python", "benchmarks/bench_mlm_pretraining.py", *shown]),  # no path of this machine
        "environment": started,
        "model": model_name,
        "settings": {
            "recipe": settings, "train_articles": args.train_articles, "validation_articles": args.validation_articles,
            "tokenizer": shown_path(args.tokenizer) if args.tokenizer else "wordpiece, trained on the training texts",
            "vocab_size": vocab_size, "threads_per_side": args.threads, "tiny": args.tiny,
        },  # fmt: skip
        "parameters": {**parameters, "native_class": runs["native"].pop("native_class")},
        "targets": TARGETS,
        "ratios": ratios,
        "runs": runs,
    }
    write_json(args.output, payload)
    for side, run in runs.items():
        print(f"{side}: validation loss {run['validation_loss']:.4f}, loop {run['train_s']:.1f} s, "
              f"process {run['wall_s']:.1f} s")  # fmt: skip
        for point in run["curve"]:
            print(f"  step {point['step']:>5}  {point['train_s']:8.1f} s  loss {point['validation_loss']:.4f}")
    print(f"final loss hfzoo / native {ratios['final_loss']:.3f} (<= 1 favours hfzoo); speed native / hfzoo: loop "
          f"{ratios['loop_speed']:.2f}x, process {ratios['process_speed']:.2f}x (> 1 favours hfzoo)")  # fmt: skip
    title = f"{model_name} masked LM on enwiki, {settings['max_steps']:,} steps: hfzoo's recipe, transformers' Trainer"
    png = plot(args.output.with_suffix(".png"), runs, title)
    print(f"wrote {args.output} and {png}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
