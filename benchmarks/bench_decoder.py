"""hfzoo's decoder presets against the native transformers models of identical shape, in one run.

`gpt-<size>` is compared with `GPT2LMHeadModel` and `llama-<size>` with `LlamaForCausalLM`, each native model built
from the hfzoo preset by `hfzoo.convert.native_model`, as `to_native` exports it (same layers, width, heads, kv
heads, ffn, vocabulary, positions, tying, activation; the parameter counts are asserted equal). Random init, fp32,
dropout 0, two threads. Figures:

- training tokens/s: forward + backward + AdamW step on a batch of `--batch-size` x `--seq-len`;
- generation tokens/s at each `--gen-batch-sizes`: greedy, `--new-tokens` after a `--prompt-len` prompt, with
  `min_new_tokens` so both models produce the same count (prefill included);
- peak memory: the peak of live tensor bytes during two warm training steps and during a warm generate call,
  each variant in its own fresh process, with the first call's RSS growth beside it (see `common.PeakMemoryProbe`).

Ratios are hfzoo / native for speed and native / hfzoo for memory, so > 1 means hfzoo is better everywhere.

    .venv/bin/python benchmarks/bench_decoder.py            # full run, 6.5 minutes on 2 quiet cores (measured)
    .venv/bin/python benchmarks/bench_decoder.py --preset-size tiny --rounds 1 --steps 1   # smoke run
"""

import argparse
import copy
import sys
from collections.abc import Callable
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, PreTrainedModel

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
    parameter_count,  # noqa: F401  (imported from here by the other benchmarks)
    print_results,  # noqa: F401  (imported from here by the other benchmarks)
    report,
    training_workload,
)

# Imported once by the memory probes' fork server, so each fresh process starts without the import cost.
PRELOAD = ("torch", "transformers", "hfzoo", "transformers.models.gpt2.modeling_gpt2",
           "transformers.models.llama.modeling_llama")
MEMORY_TRAINING_STEPS = 2  # the second step is the first with AdamW state already allocated


# hfzoo preset family -> the native class of the same shape (built by hfzoo.convert, as `to_native` exports)
NATIVE = {"gpt": "GPT2LMHeadModel", "llama": "LlamaForCausalLM"}


def zoo_config(preset: str):
    return hfzoo.preset_config(preset, hidden_dropout=0.0, attention_dropout=0.0)


def build_model(model_name: str, variant: str, seed: int) -> PreTrainedModel:
    """A randomly initialised fp32 model: hfzoo's preset `model_name` (`gpt-small`, ...) or its native twin."""
    config = zoo_config(model_name)
    torch.manual_seed(seed)
    if variant == "hfzoo":
        # from_config shares and mutates its config: each model gets its own copy. The CPU layouts are applied as
        # the recipes and `hfzoo generate` apply them (`hfzoo.core.cpu_layout`).
        return tune_for_cpu(AutoModelForCausalLM.from_config(copy.deepcopy(config)))
    return native_model(config, NATIVE[model_name.split("-")[0]])


def generation_workload(model: PreTrainedModel, args, batch_size: int) -> Callable[[], None]:
    """One greedy `generate` call producing exactly `--new-tokens` tokens per row."""
    generator = torch.Generator().manual_seed(args.seed)
    prompt = torch.randint(model.config.vocab_size, (batch_size, args.prompt_len), generator=generator).to(model.device)
    attention_mask = torch.ones_like(prompt)

    def run() -> None:
        model.eval()
        output = model.generate(
            input_ids=prompt,
            attention_mask=attention_mask,
            max_new_tokens=args.new_tokens,
            min_new_tokens=args.new_tokens,
            do_sample=False,
            pad_token_id=0,
        )
        assert output.shape == (batch_size, args.prompt_len + args.new_tokens), output.shape

    return run


def figures(args) -> list[str]:
    return ["train", *(f"generate_b{batch_size}" for batch_size in args.gen_batch_sizes)]


def workload(model: PreTrainedModel, args, figure: str, training_steps: int) -> Callable[[], None]:
    if figure == "train":
        generator = torch.Generator().manual_seed(args.seed)
        input_ids = torch.randint(model.config.vocab_size, (args.batch_size, args.seq_len), generator=generator)
        return training_workload(model, {"input_ids": input_ids, "labels": input_ids}, training_steps)
    return generation_workload(model, args, int(figure.removeprefix("generate_b")))


def tokens_per_call(args, figure: str) -> int:
    if figure == "train":
        return args.steps * args.batch_size * args.seq_len
    return int(figure.removeprefix("generate_b")) * args.new_tokens


def memory_probe(model_name: str, variant: str, figure: str, args) -> Callable[[], None]:
    """Runs in a fresh process (module level so it can be sent there): builds one model, returns the workload."""
    return workload(build_model(model_name, variant, args.seed), args, figure, MEMORY_TRAINING_STEPS)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, RESULTS_DIR / "decoder.json")
    parser.add_argument("--models", nargs="+", default=list(NATIVE), choices=list(NATIVE),
                        help="preset families to compare, each as <family>-<preset-size>")
    parser.add_argument("--seq-len", type=int, default=256, help="training sequence length")
    parser.add_argument("--gen-batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
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
    return report("decoder", args, started, models, parameters, rows + memory_rows, measure_mode_switch(models))


if __name__ == "__main__":
    main()
