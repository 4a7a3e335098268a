"""hfzoo's BERT preset against `transformers.BertForMaskedLM` of identical shape, in one run.

`bert-<size>` is compared with `BertForMaskedLM`, built from the hfzoo preset by `hfzoo.convert.native_model` as
`to_native` exports it (layers, width, heads, ffn, vocabulary, learned positions, token types, post-LayerNorm and
its epsilon, embedding LayerNorm, activation, biases, tied decoder); the parameter counts are asserted equal. Random init, fp32, dropout 0, two
threads, SDPA attention in both. Figures:

- `train`: masked-LM training tokens/s, forward + backward + AdamW step on `--batch-size` x `--seq-len` tokens
  (all tokens counted) with `--mask-fraction` of each row labelled. hfzoo's `ForMaskedLM` sends only the labelled
  positions through the vocabulary projection in training (a deliberate FLOP saving, see
  `ZooEncoderForMaskedLM`); `BertForMaskedLM` projects every position. The figure is reported as is.
- `encode`: an eval-mode forward without labels (full logits in both), the like-for-like figure for the trunk;
- peak tensor memory of two warm training steps and of a warm encode call, each variant in its own fresh
  process (first-call RSS growth beside it).

Ratios are hfzoo / native for speed and native / hfzoo for memory, so > 1 means hfzoo is better everywhere.

    .venv/bin/python benchmarks/bench_encoder.py            # full run, 2.5 minutes on 2 quiet cores (measured)
    .venv/bin/python benchmarks/bench_encoder.py --preset-size tiny --rounds 1 --steps 1   # smoke run
"""

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForMaskedLM, PreTrainedModel

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

# Imported once by the memory probes' fork server, so each fresh process starts without the import cost.
PRELOAD = ("torch", "transformers", "hfzoo", "transformers.models.bert.modeling_bert")
MEMORY_TRAINING_STEPS = 2  # the second step is the first with AdamW state already allocated
FIGURES = ("train", "encode")


def zoo_config(preset: str):
    return hfzoo.preset_config(preset, hidden_dropout=0.0, attention_dropout=0.0)


def build_model(model_name: str, variant: str, seed: int) -> PreTrainedModel:
    """A randomly initialised fp32 model: hfzoo's preset `model_name` or `BertForMaskedLM` of the same shape."""
    config = zoo_config(model_name)
    torch.manual_seed(seed)
    if variant == "hfzoo":
        # from_config shares and mutates its config: each model gets its own copy. The CPU layouts are applied as
        # the recipes and `hfzoo generate` apply them (`hfzoo.core.cpu_layout`).
        return tune_for_cpu(AutoModelForMaskedLM.from_config(copy.deepcopy(config)))
    return native_model(config, "BertForMaskedLM")


def mlm_batch(vocab_size: int, args) -> dict[str, torch.Tensor]:
    """Random tokens with exactly `--mask-fraction` of each row's positions labelled (-100 elsewhere)."""
    generator = torch.Generator().manual_seed(args.seed)
    input_ids = torch.randint(vocab_size, (args.batch_size, args.seq_len), generator=generator)
    labelled_per_row = max(1, round(args.mask_fraction * args.seq_len))
    positions = torch.rand(args.batch_size, args.seq_len, generator=generator).argsort(-1)[:, :labelled_per_row]
    labels = torch.full_like(input_ids, -100).scatter(1, positions, input_ids.gather(1, positions))
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def encode_workload(model: PreTrainedModel, batch: dict[str, torch.Tensor]) -> Callable[[], None]:
    """One eval-mode forward without labels: full `[batch, seq, vocab]` logits in both models."""
    inputs = {"input_ids": batch["input_ids"], "attention_mask": batch["attention_mask"]}

    def run() -> None:
        model.eval()
        with torch.no_grad():
            logits = model(**inputs).logits
        assert logits.shape == (*inputs["input_ids"].shape, model.config.vocab_size), logits.shape

    return run


def workload(model: PreTrainedModel, args, figure: str, training_steps: int) -> Callable[[], None]:
    batch = mlm_batch(model.config.vocab_size, args)
    if figure == "train":
        return training_workload(model, batch, training_steps)
    return encode_workload(model, batch)


def tokens_per_call(args, figure: str) -> int:
    return (args.steps if figure == "train" else 1) * args.batch_size * args.seq_len


def memory_probe(model_name: str, variant: str, figure: str, args) -> Callable[[], None]:
    """Runs in a fresh process (module level so it can be sent there): builds one model, returns the workload."""
    return workload(build_model(model_name, variant, args.seed), args, figure, MEMORY_TRAINING_STEPS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, RESULTS_DIR / "encoder.json")
    parser.add_argument("--seq-len", type=int, default=256, help="sequence length (train and encode)")
    parser.add_argument("--mask-fraction", type=float, default=0.15, help="share of each row's positions labelled")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ensure_malloc_setting(args.malloc)
    torch.set_num_threads(THREADS)
    started = environment()
    model_name = f"bert-{args.preset_size}"
    memory_rows = measure_memory(memory_probe, [model_name], list(FIGURES), args, PRELOAD) if args.memory else []
    models = {model_name: {variant: build_model(model_name, variant, args.seed) for variant in VARIANTS}}
    parameters = check_parameters(models)
    rows = measure_speed(
        [model_name], lambda name, variant: build_model(name, variant, args.seed), list(FIGURES),
        lambda model, figure: workload(model, args, figure, args.steps),
        lambda figure: tokens_per_call(args, figure), args,
    )
    return report("encoder", args, started, models, parameters, rows + memory_rows, measure_mode_switch(models))


if __name__ == "__main__":
    main()
