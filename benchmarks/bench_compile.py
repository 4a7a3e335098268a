"""Compiled hfzoo against native transformers, eager and compiled, in one run (issue 19 items 1 and 2).

Training tokens/s (forward + backward + AdamW, the shapes and batches of bench_decoder / bench_encoder /
bench_seq2seq) for hfzoo compiled, hfzoo eager, native eager and native compiled, timed interleaved; each model is
compiled in place (`nn.Module.compile`, as `--compile true` does in the recipes) and compiled by its untimed warm-up
call. MFU is tokens/s x model FLOPs per token / the fp32 matmul peak this run measured, with FLOPs per token =
6 N + 12 L d s (N: non-embedding parameters plus the output projection, L layers, d width, s sequence length; for
the encoder-decoder s is the mean of source and target lengths): both are printed. With `--dtype bfloat16` training
runs under bf16 autocast (fp32 weights and AdamW state, as the recipes' `--mixed_precision bf16`), generation runs
on weights cast to bf16, and MFU is against the bf16 matmul peak measured the same way.

Generation tokens/s at each `--gen-batch-sizes` for the generating families: hfzoo with a static cache and compiled
decoding steps against native eager with its default dynamic cache.

    .venv/bin/python benchmarks/bench_compile.py           # full run (minutes of compilation first)
    .venv/bin/python benchmarks/bench_compile.py --tiny    # smoke run
"""

import argparse
import contextlib
import os
import shlex
import sys
import time
from pathlib import Path

import torch
from transformers.generation.configuration_utils import CompileConfig

from hfzoo.integrations.torch import recompile_limit
from hfzoo.integrations.transformers import compile_on_every_device

sys.path.insert(0, str(Path(__file__).resolve().parent))
import bench_decoder  # noqa: E402  (the benchmarks folder is not a package)
import bench_encoder  # noqa: E402
import bench_seq2seq  # noqa: E402
from common import (  # noqa: E402
    RESULTS_DIR,
    THREADS,
    Group,
    Variant,
    add_common_arguments,
    ensure_malloc_setting,
    environment,
    paired_speed_ratio,
    parameter_count,
    print_table,
    rate_summary,
    run_interleaved,
    write_json,
)

FAMILY_BENCHMARK = {"gpt": bench_decoder, "llama": bench_decoder, "bert": bench_encoder, "t5": bench_seq2seq,
                    "bart": bench_seq2seq}  # fmt: skip
GENERATING = ("gpt", "llama", "t5", "bart")
PRECISION_NAMES = {"float32": "fp32", "bfloat16": "bf16"}  # --dtype -> how tables name it
TRAINING_VARIANTS = ("hfzoo_compiled", "hfzoo_eager", "native_eager", "native_compiled")
TINY = ["--preset-size", "tiny", "--models", "gpt", "--rounds", "1", "--steps", "1", "--batch-size", "2",
        "--seq-len", "16", "--source-len", "16", "--target-len", "8", "--gen-batch-sizes", "1", "--prompt-len", "4",
        "--new-tokens", "3", "--matmul-size", "256"]  # fmt: skip


def matmul_peak_flops(size: int, device: str, dtype: torch.dtype = torch.float32, repeats: int = 10) -> float:
    """The `dtype` matrix-multiply rate of `device` now (best of `repeats` square products), in FLOP/s."""
    a, b = (torch.randn(size, size, device=device, dtype=dtype) for _ in range(2))
    torch.mm(a, b)
    best = min(_timed(lambda: torch.mm(a, b)) for _ in range(repeats))
    return 2 * size**3 / best


def _timed(call) -> float:
    start = time.perf_counter()
    call()
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()
    return time.perf_counter() - start


def flops_per_token(model: torch.nn.Module, sequence_length: float) -> float:
    """6 N + 12 L d s: weights' forward and backward, plus attention scores and values (the notes' MFU count)."""
    config = model.config
    embedding = model.get_input_embeddings().weight.numel()
    tied = model.get_output_embeddings().weight is model.get_input_embeddings().weight
    non_embedding = parameter_count(model) - (0 if tied else embedding)  # a tied head is the output projection
    layers = config.num_hidden_layers + (getattr(config, "num_decoder_layers", 0) if config.is_encoder_decoder else 0)
    return 6 * non_embedding + 12 * layers * config.hidden_size * sequence_length


def autocast(args) -> contextlib.AbstractContextManager:
    """Mixed precision for `--dtype bfloat16` (the weights stay fp32), nothing for fp32."""
    if args.dtype == "float32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(args.device).type, dtype=getattr(torch, args.dtype))


def build(model_name: str, variant: str, args) -> torch.nn.Module:
    """`hfzoo_*` or `native_*` from the family's benchmark on `--device`, compiled in place for `*_compiled`."""
    model = FAMILY_BENCHMARK[model_name.split("-")[0]].build_model(model_name, variant.split("_")[0], args.seed)
    model.to(args.device)
    if variant.endswith("compiled"):
        model.compile()
    return model


def training_rows(args, model_names: list[str], peak: float) -> list[dict]:
    groups, flops = [], {}
    for model_name in model_names:
        benchmark = FAMILY_BENCHMARK[model_name.split("-")[0]]
        variants = []
        for variant in TRAINING_VARIANTS:
            model = build(model_name, variant, args)
            steps = benchmark.workload(model, args, "train", args.steps)

            def run(steps=steps) -> None:
                with autocast(args):
                    steps()

            variants.append(Variant(variant, run, benchmark.tokens_per_call(args, "train")))
            if variant == "hfzoo_eager":
                seq2seq = model.config.is_encoder_decoder
                sequence_length = (args.source_len + args.target_len) / 2 if seq2seq else args.seq_len
                flops[model_name] = flops_per_token(model, sequence_length)
        groups.append(Group(model_name, variants))
    timings = run_interleaved(groups, rounds=args.rounds, warmup=args.warmup)
    rows = []
    for group in groups:
        seconds, units = timings[group.name], group.variants[0].units
        row = {"model": group.name, "figure": "train", "unit": "tokens/s", "flops_per_token": flops[group.name]}
        for variant in TRAINING_VARIANTS:
            rate = rate_summary(seconds[variant], units)
            row[variant] = {**rate, "mfu": rate["median"] * flops[group.name] / peak}
        row["ratio_vs_native_eager"] = paired_speed_ratio(seconds["hfzoo_compiled"], seconds["native_eager"])
        row["ratio_vs_native_compiled"] = paired_speed_ratio(seconds["hfzoo_compiled"], seconds["native_compiled"])
        rows.append(row)
    return rows


def generation_rows(args, model_names: list[str]) -> list[dict]:
    """hfzoo: static cache, each decoding step compiled (on CPU generate compiles only when the config says so).

    On a GPU the steps are compiled with CUDA graphs (`reduce-overhead`, transformers' own default there): a small
    model's decoding step is a few hundred tiny kernels whose launches, not their arithmetic, take the time."""
    mode = "reduce-overhead" if args.device.startswith("cuda") else "default"
    compile_config = compile_on_every_device(CompileConfig(fullgraph=True, mode=mode))
    groups = []
    for model_name in model_names:
        benchmark = FAMILY_BENCHMARK[model_name.split("-")[0]]
        for batch_size in args.gen_batch_sizes:
            variants = []
            for variant in ("hfzoo", "native"):
                model = benchmark.build_model(model_name, variant, args.seed)
                model.to(args.device, getattr(torch, args.dtype))
                if variant == "hfzoo":
                    model.generation_config.cache_implementation = "static"
                    model.generation_config.compile_config = compile_config
                run = benchmark.generation_workload(model, args, batch_size)
                variants.append(Variant(variant, run, batch_size * args.new_tokens))
            groups.append(Group(f"{model_name}/generate_b{batch_size}", variants))
    timings = run_interleaved(groups, rounds=args.rounds, warmup=args.warmup)
    rows = []
    for group in groups:
        model_name, figure = group.name.split("/")
        seconds, units = timings[group.name], group.variants[0].units
        rows.append({
            "model": model_name, "figure": figure, "unit": "tokens/s",
            "hfzoo_static_compiled": rate_summary(seconds["hfzoo"], units),
            "native_eager": rate_summary(seconds["native"], units),
            "ratio_vs_native_eager": paired_speed_ratio(seconds["hfzoo"], seconds["native"]),
        })  # fmt: skip
    return rows


def print_rows(peak: float, dtype: str, training: list[dict], generation: list[dict]) -> None:
    print(f"measured {PRECISION_NAMES[dtype]} matmul peak: {peak / 1e9:,.1f} GFLOP/s")
    table = []
    for row in training:
        cells = [f"{row[variant]['median']:,.0f} ({100 * row[variant]['mfu']:.0f}%)" for variant in TRAINING_VARIANTS]
        ratios = [f"{row[key]['median']:.2f}x" for key in ("ratio_vs_native_eager", "ratio_vs_native_compiled")]
        table.append([row["model"], f"{row['flops_per_token'] / 1e6:,.1f}", *cells, *ratios])
    header = ["model", "MFLOP/token", *(f"{variant} tok/s (MFU)" for variant in TRAINING_VARIANTS),
              "vs native eager", "vs native compiled"]  # fmt: skip
    print_table(header, table)
    table = [
        [row["model"], row["figure"], f"{row['hfzoo_static_compiled']['median']:,.0f}",
         f"{row['native_eager']['median']:,.0f}", f"{row['ratio_vs_native_eager']['median']:.2f}x"]
        for row in generation
    ]  # fmt: skip
    if table:
        print_table(["model", "figure", "hfzoo static+compiled tok/s", "native eager tok/s", "ratio"], table)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    add_common_arguments(parser, RESULTS_DIR / "compile.json")
    parser.add_argument("--tiny", action="store_true", help="smoke run: gpt-tiny, tiny shapes, one round")
    parser.add_argument("--models", nargs="+", default=list(FAMILY_BENCHMARK), choices=list(FAMILY_BENCHMARK))
    parser.add_argument("--seq-len", type=int, default=256, help="decoder and encoder training sequence length")
    parser.add_argument("--source-len", type=int, default=256, help="encoder-decoder source tokens")
    parser.add_argument("--target-len", type=int, default=64, help="encoder-decoder target tokens in training")
    parser.add_argument("--mask-fraction", type=float, default=0.15, help="share of BERT's positions labelled")
    parser.add_argument("--gen-batch-sizes", type=int, nargs="+", default=[1, 8])
    parser.add_argument("--prompt-len", type=int, default=32)
    parser.add_argument("--new-tokens", type=int, default=64)
    parser.add_argument("--matmul-size", type=int, default=2048, help="side of the square products timed for the peak")
    parser.add_argument("--device", default="cpu", help="where models and batches live: cpu (default) or cuda")
    parser.add_argument("--dtype", choices=list(PRECISION_NAMES), default="float32",
                        help="bfloat16: training under bf16 autocast, generation on bf16 weights, MFU against the "
                             "bf16 matmul peak")  # fmt: skip
    args = parser.parse_args(argv)
    return parser.parse_args([*TINY, *(argv if argv is not None else sys.argv[1:])]) if args.tiny else args


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    model_names = [f"{family}-{args.preset_size}" for family in args.models]
    ensure_malloc_setting(args.malloc)
    torch.set_num_threads(THREADS)
    peak = matmul_peak_flops(args.matmul_size, args.device, getattr(torch, args.dtype))
    started = environment()
    # One process compiles every model here, and transformers' output decorators wrap all their forwards in one
    # code object, whose guards then count each model's graphs against dynamo's per-code limit (8).
    with recompile_limit(64):
        training = training_rows(args, model_names, peak)
        generation = generation_rows(args, [name for name in model_names if name.split("-")[0] in GENERATING])
    print_rows(peak, args.dtype, training, generation)
    started["load_average_end"] = os.getloadavg()
    settings = {key: value for key, value in vars(args).items() if key != "output"}  # a path of this machine
    given = list(argv if argv is not None else sys.argv[1:])
    if "--output" in given:  # a path of this machine
        del given[given.index("--output") : given.index("--output") + 2]
    payload = {"benchmark": "compile", "command": shlex.join(["python", "benchmarks/bench_compile.py", *given]),
               "environment": started, "settings": settings, "matmul_peak_flops": peak,
               "results": training + generation}  # fmt: skip
    write_json(args.output, payload)
    print(f"wrote {args.output}")
    return payload


if __name__ == "__main__":
    main()
