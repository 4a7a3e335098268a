"""hfzoo's encoder-decoder presets against the native transformers models of identical shape, in one run.

`t5-<size>` is compared with `T5ForConditionalGeneration` (v1.1 style: gated GeLU, relative attention buckets and
max distance, no biases, RMSNorm epsilon, untied LM head) and `bart-<size>` with `BartForConditionalGeneration`
(learned positions, post-LayerNorm, embedding LayerNorm, GeLU, tied embeddings), each native model built from the
hfzoo preset by `hfzoo.convert.native_model`, as `to_native` exports it (so T5's gated GeLU is transformers'
`gated-gelu_python`, the exact GeLU hfzoo computes, and BART's position table, with fairseq's 2 offset rows, has
as many rows as hfzoo's). The parameter counts are asserted equal.
Random init, fp32, dropout 0, two threads, SDPA attention in both. Figures:

- `train`: tokens/s of forward + backward + AdamW step on `--batch-size` pairs of a `--source-len` source and a
  `--target-len` target (labels shifted right inside the model); source and target tokens are both counted;
- `generate_b<n>` for each `--gen-batch-sizes`: new tokens/s of greedy `generate` with a `--source-len` source,
  exactly `--new-tokens` per row (`min_new_tokens` = `max_new_tokens`), encoder pass included;
- peak tensor memory of two warm training steps and of a warm generate call, each variant in its own fresh
  process (first-call RSS growth beside it).

Ratios are hfzoo / native for speed and native / hfzoo for memory, so > 1 means hfzoo is better everywhere.

    .venv/bin/python benchmarks/bench_seq2seq.py            # full run, 6 minutes on 2 quiet cores (measured)
    .venv/bin/python benchmarks/bench_seq2seq.py --preset-size tiny --rounds 1 --steps 1   # smoke run
"""

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForSeq2SeqLM, PreTrainedModel

import hfzoo
from hfzoo.convert import native_model
from hfzoo.core.cpu_layout import tune_for_cpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402  (the benchmarks folder is not a package)
    RESULTS_DIR,
    THREADS,
    VARIANTS,
    add_common_arguments,
    check_parameters,
    ensure_malloc_setting,
    environment,
    measure_memory,
    measure_mode_switch,
    measure_speed,
    report,
    training_workload,
)

PRELOAD = ("torch", "transformers", "hfzoo", "transformers.models.t5.modeling_t5",
           "transformers.models.bart.modeling_bart")
MEMORY_TRAINING_STEPS = 2  # the second step is the first with AdamW state already allocated


# hfzoo preset family -> the native class of the same shape (built by hfzoo.convert, as `to_native` exports)
NATIVE = {"t5": "T5ForConditionalGeneration", "bart": "BartForConditionalGeneration"}


def zoo_config(preset: str):
    return hfzoo.preset_config(preset, hidden_dropout=0.0, attention_dropout=0.0)


def build_model(model_name: str, variant: str, seed: int) -> PreTrainedModel:
    """A randomly initialised fp32 model: hfzoo's preset `model_name` or its native twin."""
    config = zoo_config(model_name)
    torch.manual_seed(seed)
    if variant == "hfzoo":
        # from_config shares and mutates its config: each model gets its own copy. The CPU layouts are applied as
        # the recipes and `hfzoo generate` apply them (`hfzoo.core.cpu_layout`).
        return tune_for_cpu(AutoModelForSeq2SeqLM.from_config(copy.deepcopy(config)))
    return native_model(config, NATIVE[model_name.split("-")[0]])


def seq2seq_batch(vocab_size: int, batch_size: int, source_len: int, target_len: int, seed: int) -> dict:
    """Random source and target tokens; ids 0-2 (pad, eos, unk) are avoided so nothing is read as padding or end."""
    generator = torch.Generator().manual_seed(seed)
    input_ids = torch.randint(3, vocab_size, (batch_size, source_len), generator=generator)
    labels = torch.randint(3, vocab_size, (batch_size, target_len), generator=generator)
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def generation_workload(model: PreTrainedModel, args, batch_size: int) -> Callable[[], None]:
    """One greedy `generate` call producing exactly `--new-tokens` tokens per row after the start token."""
    batch = seq2seq_batch(model.config.vocab_size, batch_size, args.source_len, 1, args.seed)
    batch = {key: value.to(model.device) for key, value in batch.items()}

    def run() -> None:
        model.eval()
        output = model.generate(
            input_ids=batch["input_ids"],
            attention_mask=batch["attention_mask"],
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
        )
        assert output.shape == (batch_size, 1 + args.new_tokens), output.shape

    return run


def figures(args) -> list[str]:
    return ["train", *(f"generate_b{batch_size}" for batch_size in args.gen_batch_sizes)]


def workload(model: PreTrainedModel, args, figure: str, training_steps: int) -> Callable[[], None]:
    if figure == "train":
        batch = seq2seq_batch(model.config.vocab_size, args.batch_size, args.source_len, args.target_len, args.seed)
        return training_workload(model, batch, training_steps)
    return generation_workload(model, args, int(figure.removeprefix("generate_b")))


def tokens_per_call(args, figure: str) -> int:
    if figure == "train":
        return args.steps * args.batch_size * (args.source_len + args.target_len)
    return int(figure.removeprefix("generate_b")) * args.new_tokens


def memory_probe(model_name: str, variant: str, figure: str, args) -> Callable[[], None]:
    """Runs in a fresh process (module level so it can be sent there): builds one model, returns the workload."""
    return workload(build_model(model_name, variant, args.seed), args, figure, MEMORY_TRAINING_STEPS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, RESULTS_DIR / "seq2seq.json")
    parser.add_argument("--models", nargs="+", default=list(NATIVE), choices=list(NATIVE))
    parser.add_argument("--source-len", type=int, default=256, help="source tokens (train and generate)")
    parser.add_argument("--target-len", type=int, default=64, help="target tokens in training")
    parser.add_argument("--gen-batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--new-tokens", type=int, default=64, help="tokens each generate call produces per row")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ensure_malloc_setting(args.malloc)
    torch.set_num_threads(THREADS)
    started = environment()
    model_names = [f"{family}-{args.preset_size}" for family in args.models]
    memory_rows = measure_memory(memory_probe, model_names, figures(args), args, PRELOAD) if args.memory else []
    models = {name: {variant: build_model(name, variant, args.seed) for variant in VARIANTS} for name in model_names}
    parameters = check_parameters(models)
    rows = measure_speed(
        model_names, lambda name, variant: build_model(name, variant, args.seed), figures(args),
        lambda model, figure: workload(model, args, figure, args.steps),
        lambda figure: tokens_per_call(args, figure), args,
    )
    return report("seq2seq", args, started, models, parameters, rows + memory_rows, measure_mode_switch(models))


if __name__ == "__main__":
    main()
