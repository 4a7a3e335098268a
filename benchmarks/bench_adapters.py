"""Forward latency of adapter compositions (`hfzoo.adapters.compose`) against the base model and single PEFT
adapters, all measured in one run.

A `llama-<size>` preset (random init, fp32, dropout 0, eval, no grad, `--threads` 2) gets N = 1, 2, 4, 8 adapters of
one kind, each a real PEFT folder written here:

- `lora`: LoRA r=8 on PEFT's default targets for the model (the fused `qkv_proj`), random A and B;
- `bottleneck`: hfzoo's bottleneck adapter with its defaults (Pfeiffer placement: after the feed-forward block,
  on `mlp.down_proj`, width d/16), random weights.

Every composition strategy runs at every N: `fixed` on a mixed batch (row i gets adapter i mod N), `average`, `soft`,
`hard` (inference; routers drawn at random so that tokens really spread over the adapters) and `fusion`. Beside
them, in every group: the base model, a single unmerged PEFT adapter (`single`), PEFT's own mixed batch over the
same N adapters (`peft_mixed`, `adapter_names`), and for LoRA the single adapter merged into the weights (`merged`).
Groups are (kind, shape, N); each round runs every variant of a group once in rotating order, and ratios are
medians of per-round latency ratios (see `common.py`). A call is one forward of `B x T` tokens with
`logits_to_keep=1` (a prefill/scoring forward: logits over every position would add a vocabulary projection worth
~40% of the base model's FLOPs here and dilute every adapter cost; `--logits-to-keep 0` keeps them all); shapes
with fewer than 1024 tokens repeat the forward within a call so that a call takes long enough to time.

The printed table and the issue's targets use latency ratios, variant / reference (< 1: faster): hard <= 1.05x
single at every N, fusion <= 1.5x base at N = 8, fixed (mixed batch) <= 1.1x single. The JSON rows also carry the
layout `report.py` renders (speed, > 1 favouring the variant, against `single` for the strategies the targets compare
with one adapter, else against `base`), and peak tensor memory rows (a warm call at the largest N, fresh processes).
The issue's figures are taken with 2 threads; when other work oversubscribes the two cores, two-thread kernels stall
waiting for each other (seen: a 1x32 forward at 0.4 s instead of 0.03 s, ratios anywhere in 0.4-5x), and
`--threads 1` is what still measures the compute.

    .venv/bin/python benchmarks/bench_adapters.py                 # full run, 7 minutes on 2 quiet cores (measured)
    .venv/bin/python benchmarks/bench_adapters.py --preset-size tiny --counts 2 --shapes 2x8 --tokens-per-call 16
"""

import argparse
import copy
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch
from peft import LoraConfig, PeftModel, get_peft_model
from transformers import AutoModelForCausalLM, PreTrainedModel

import hfzoo
from hfzoo.adapters import STRATEGIES, BottleneckConfig, compose
from hfzoo.core.cpu_layout import tune_for_cpu

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import (  # noqa: E402  (the benchmarks folder is not a package)
    RESULTS_DIR,
    THREADS,
    Group,
    PeakMemoryProbe,
    Variant,
    ensure_malloc_setting,
    environment,
    paired_speed_ratio,
    print_table,
    rate_summary,
    run_interleaved,
    write_json,
)

KINDS = ("lora", "bottleneck")
REFERENCES = {"lora": ("base", "single", "merged", "peft_mixed"), "bottleneck": ("base", "single", "peft_mixed")}
ROUTER_INIT_STD = 1.0  # random routers, so that hard routing really sends tokens to different adapters
PRELOAD = ("torch", "transformers", "peft", "hfzoo")
# The reference of each variant's rendered speed ratio (`report.py` shows one): the for the targets, else base.
SHOWN_REFERENCE = {"base": "single", "fixed": "single", "average": "single", "soft": "single", "hard": "single"}
# The targets, as latency ratios: `n` None = every N, else that N only; `kinds`: adapter kinds it is set for
# (hard routing's is stated against a single LoRA).
TARGETS = (
    {"variant": "hard", "reference": "single", "at_most": 1.05, "n": None, "kinds": ("lora",)},
    {"variant": "fusion", "reference": "base", "at_most": 1.5, "n": 8, "kinds": KINDS},
    {"variant": "fixed", "reference": "single", "at_most": 1.1, "n": None, "kinds": KINDS},
)


def adapter_name(index: int) -> str:
    return f"task{index}"


def build_base(size: str, seed: int) -> PreTrainedModel:
    config = hfzoo.preset_config(f"llama-{size}", hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(seed)
    # from_config shares and mutates its config: the model gets its own copy. The CPU layouts are applied as the
    # recipes and `hfzoo generate` apply them (`hfzoo.core.cpu_layout`).
    return tune_for_cpu(AutoModelForCausalLM.from_config(copy.deepcopy(config)).eval())


def sharing_copy(base: PreTrainedModel) -> PreTrainedModel:
    """A copy of `base` whose modules are new but whose parameters are `base`'s own tensors.

    Forty-odd variants of a frozen model then cost one set of weights; nothing here writes to base weights (the
    merged variant, which does, is built from a real copy).
    """
    return copy.deepcopy(base, memo={id(parameter): parameter for parameter in base.parameters()})


def adapter_config(kind: str):
    if kind == "lora":
        # init_lora_weights=False: B is random too, so the adapters are not zero (the cost is the same either way)
        return LoraConfig(r=8, lora_alpha=16, init_lora_weights=False, task_type="CAUSAL_LM")
    return BottleneckConfig(init_weights=False, task_type="CAUSAL_LM")


def write_adapters(base: PreTrainedModel, kind: str, count: int, root: Path, seed: int) -> list[Path]:
    """`count` PEFT adapter folders of `kind` for `base`, each from its own seed."""
    folders = []
    for index in range(count):
        torch.manual_seed(seed + 1 + index)
        peft_model = get_peft_model(sharing_copy(base), adapter_config(kind))
        folders.append(root / kind / adapter_name(index))
        peft_model.save_pretrained(folders[-1])
    return folders


def build_variant(base: PreTrainedModel, kind: str, variant: str, folders: list[Path], seed: int):
    """The model of one variant and the extra forward arguments it needs, on a parameter-sharing copy of `base`."""
    names = [adapter_name(index) for index in range(len(folders))]
    if variant == "base":
        return sharing_copy(base), {}
    if variant == "merged":
        return PeftModel.from_pretrained(copy.deepcopy(base), folders[0]).merge_and_unload().eval(), {}
    if variant in ("single", "peft_mixed"):
        model = PeftModel.from_pretrained(sharing_copy(base), folders[0], adapter_name=names[0])
        if variant == "single":
            return model.eval(), {}
        for name, folder in zip(names[1:], folders[1:]):
            model.load_adapter(folder, adapter_name=name)
        return model.eval(), {"adapter_names": names}
    composed = compose(sharing_copy(base), dict(zip(names, folders)), variant).eval()
    generator = torch.Generator().manual_seed(seed)
    for layer in composed.composed_layers.values():
        router = getattr(layer.combiner, "proj", None)
        if router is not None:
            torch.nn.init.normal_(router.weight, std=ROUTER_INIT_STD / router.in_features**0.5, generator=generator)
    return composed, {"adapter_names": names} if variant == "fixed" else {}


def forward_workload(model, forward_kwargs: dict, batch: int, length: int, args):
    """One timed call: `calls` forwards of a fixed random `batch x length` batch, eval and no grad."""
    generator = torch.Generator().manual_seed(args.seed)
    input_ids = torch.randint(model.config.vocab_size, (batch, length), generator=generator)
    kwargs = dict(forward_kwargs)
    if "adapter_names" in kwargs:  # row i gets adapter i mod N: a mixed batch
        kwargs["adapter_names"] = [kwargs["adapter_names"][row % len(kwargs["adapter_names"])] for row in range(batch)]
    calls = max(1, args.tokens_per_call // (batch * length))

    def run() -> None:
        with torch.no_grad():
            for _ in range(calls):
                model(input_ids=input_ids, logits_to_keep=args.logits_to_keep, **kwargs)

    return run, calls


def variants_of(kind: str, strategies: list[str]) -> tuple[str, ...]:
    return (*REFERENCES[kind], *strategies)


def parse_shape(text: str) -> tuple[int, int]:
    batch, _, length = text.partition("x")
    return int(batch), int(length)


def memory_probe(kind: str, variant: str, count: int, root: str, args):
    """Runs in a fresh process (module level so it can be sent there): builds one variant, returns its workload."""
    base = build_base(args.preset_size, args.seed)
    folders = [Path(root) / kind / adapter_name(index) for index in range(count)]
    model, kwargs = build_variant(base, kind, variant, folders, args.seed)
    batch, length = parse_shape(args.shapes[0])
    return forward_workload(model, kwargs, batch, length, args)[0]


def latency_ratio(candidate: list[float], reference: list[float]) -> dict:
    """Median (min-max) over rounds of candidate seconds / reference seconds (< 1: the candidate is faster)."""
    return paired_speed_ratio(reference, candidate)


def model_name(args, kind: str) -> str:
    return f"llama-{args.preset_size} + {kind}"


def measure_speed(args, base: PreTrainedModel, folders: dict[str, list[Path]]) -> list[dict]:
    """One row per (kind, shape, N, variant), in the layout `report.py` renders (`hfzoo` = the variant, then its
    reference and the speed ratio, > 1 favouring the variant), plus latencies and latency ratios to the base model
    and to the single adapter, which is how the issue states its targets."""
    groups, calls_of = [], {}
    for kind in args.kinds:
        references = {}  # base, single and merged do not depend on N: one model each, timed in every group
        for n in args.counts:
            for shape in args.shapes:
                batch, length = parse_shape(shape)
                variants = []
                for variant in variants_of(kind, args.strategies):
                    key = variant if variant in ("base", "single", "merged") else (variant, n)
                    if key not in references:
                        references[key] = build_variant(base, kind, variant, folders[kind][:n], args.seed)
                    run, calls = forward_workload(*references[key], batch, length, args)
                    variants.append(Variant(variant, run, batch * length * calls))
                    calls_of[shape] = calls
                groups.append(Group(f"{kind}/{shape}/{n}", variants))
    timings = run_interleaved(groups, rounds=args.rounds, warmup=args.warmup)
    rows = []
    for group in groups:
        kind, shape, n = group.name.split("/")
        times, units = timings[group.name], group.variants[0].units
        for variant in variants_of(kind, args.strategies):
            reference = SHOWN_REFERENCE.get(variant, "base")
            per_call = [value / calls_of[shape] * 1000 for value in times[variant]]
            rows.append({
                "model": model_name(args, kind),
                "figure": f"{variant} N={n} {shape}",
                "unit": "tokens/s",
                "hfzoo": {**rate_summary(times[variant], units),
                          "cpu_utilisation": timings.cpu_utilisation(group.name, variant)},
                reference: rate_summary(times[reference], units),
                "ratio": paired_speed_ratio(times[variant], times[reference]),
                "kind": kind, "shape": shape, "n": int(n), "variant": variant,
                "latency_ms": {"median": statistics.median(per_call), "min": min(per_call), "max": max(per_call)},
                "latency_vs_base": latency_ratio(times[variant], times["base"]),
                "latency_vs_single": latency_ratio(times[variant], times["single"]),
            })
    return rows


def measure_memory(args, root: Path) -> list[dict]:
    """Peak tensor memory of one warm call of the first shape (first-call RSS growth beside it), each variant at the
    largest N in a fresh process, as rows against the base model (ratio base / variant, > 1 favouring the variant)."""
    count, shape = max(args.counts), args.shapes[0]
    rows = []
    with PeakMemoryProbe(preload=PRELOAD) as probe:
        for kind in args.kinds:
            wanted = ["base", *(args.memory_variants or variants_of(kind, args.strategies))]
            peaks = {
                variant: probe.measure(memory_probe, kind, variant, count, str(root), args)
                for variant in variants_of(kind, args.strategies) if variant in wanted
            }
            for variant, peak in peaks.items():
                rows.append({
                    "model": model_name(args, kind), "figure": f"memory {variant} N={count} {shape}",
                    "unit": "MiB peak tensor memory", "hfzoo": peak, "base": peaks["base"],
                    "ratio": {"median": peaks["base"]["peak_tensor_mib"] / peak["peak_tensor_mib"]},
                    "kind": kind, "shape": shape, "n": count, "variant": variant,
                })
    return rows


def check_targets(rows: list[dict]) -> list[dict]:
    """Every timed row a target applies to, with its median latency ratio and whether it is within the target."""
    checks = []
    for target in TARGETS:
        for row in rows:
            at_n = target["n"] is None or row["n"] == target["n"]
            if row["variant"] == target["variant"] and at_n and row["kind"] in target["kinds"]:
                ratio = row[f"latency_vs_{target['reference']}"]
                checks.append({
                    "variant": target["variant"], "reference": target["reference"], "at_most": target["at_most"],
                    "kind": row["kind"], "shape": row["shape"], "n": row["n"], "ratio": ratio["median"],
                    "min": ratio["min"], "max": ratio["max"], "met": ratio["median"] <= target["at_most"],
                })
    return checks


def print_results(rows: list[dict], memory: list[dict], checks: list[dict]) -> None:
    def spread(summary: dict, digits: int = 2) -> str:
        return f"{summary['median']:.{digits}f} ({summary['min']:.{digits}f}-{summary['max']:.{digits}f})"

    print_table(
        ["kind", "shape", "N", "variant", "ms/forward", "x base", "x single", "cpu s/s"],
        [[row["kind"], row["shape"], row["n"], row["variant"], spread(row["latency_ms"]),
          spread(row["latency_vs_base"]), spread(row["latency_vs_single"]), f"{row['hfzoo']['cpu_utilisation']:.2f}"]
         for row in rows],
    )
    if memory:
        print()
        print_table(
            ["kind", "shape", "N", "variant", "peak tensor memory", "first-call RSS growth"],
            [[m["kind"], m["shape"], m["n"], m["variant"], f"{m['hfzoo']['peak_tensor_mib']:.1f} MiB",
              f"{m['hfzoo']['first_call_rss_growth_mib']:.1f} MiB"]
             for m in memory],
        )
    print()
    print_table(
        ["target (latency ratio)", "kind", "shape", "N", "median (min-max)", "met"],
        [[f"{c['variant']} <= {c['at_most']}x {c['reference']}", c["kind"], c["shape"], c["n"],
          f"{c['ratio']:.3f} ({c['min']:.2f}-{c['max']:.2f})", "yes" if c["met"] else "NO"] for c in checks],
    )


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset-size", default="small", help="the base model is llama-<size> (tiny, small, base)")
    parser.add_argument("--kinds", nargs="+", default=list(KINDS), choices=KINDS)
    parser.add_argument("--strategies", nargs="+", default=list(STRATEGIES), choices=list(STRATEGIES))
    parser.add_argument("--counts", type=int, nargs="+", default=[1, 2, 4, 8], help="numbers of adapters N")
    parser.add_argument("--shapes", nargs="+", default=["8x128", "1x32"], help="batch x sequence length")
    parser.add_argument("--tokens-per-call", type=int, default=1024,
                        help="smaller shapes repeat their forward within a timed call up to this many tokens")
    parser.add_argument("--logits-to-keep", type=int, default=1, help="0: logits at every position")
    parser.add_argument("--rounds", type=int, default=7, help="timed rounds (each runs every variant once)")
    parser.add_argument("--threads", type=int, default=THREADS,
                        help="torch threads (the issue's: 2; on an oversubscribed host 1 measures compute, not stalls)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per variant before the rounds")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory processes")
    parser.add_argument("--memory-variants", nargs="+", help="measure the memory of these variants only (default all)")
    parser.add_argument("--malloc", choices=("tuned", "default"), default="tuned",
                        help="glibc malloc thresholds to run under (the script re-executes itself to apply them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "adapters.json")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ensure_malloc_setting(args.malloc)
    torch.set_num_threads(args.threads)
    started = environment()
    base = build_base(args.preset_size, args.seed)
    with tempfile.TemporaryDirectory(prefix="bench_adapters_") as root:
        folders = {kind: write_adapters(base, kind, max(args.counts), Path(root), args.seed) for kind in args.kinds}
        memory = measure_memory(args, Path(root)) if args.memory else []
        rows = measure_speed(args, base, folders)
    # A load far above the two cores at either end means other work shared the machine: rerun.
    started["load_average_end"] = os.getloadavg()
    checks = check_targets(rows)
    payload = {
        "benchmark": "adapters",
        "command": " ".join(["python benchmarks/bench_adapters.py", *(sys.argv[1:] if argv is None else argv)]),
        "environment": started,
        "settings": {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()},
        "results": rows + memory,
        "targets": checks,
    }
    print_results(rows, memory, checks)
    print(f"load average: start {started['load_average']}, end {started['load_average_end']}")
    write_json(args.output, payload)
    print(f"wrote {args.output}")
    return payload


if __name__ == "__main__":
    main()
