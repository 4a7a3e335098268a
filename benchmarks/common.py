"""The measuring harness every hfzoo benchmark shares (decoder, encoder, seq2seq, adapters); the pretraining side by
sides run the recipe through `recipe_runs`.

The machine is two shared, noisy cores whose speed drifts 10-30% between minutes, so absolute numbers are not
comparable across runs. What is comparable is variants measured side by side: every round runs each variant once,
in an order that rotates from round to round, and a ratio is the median of the per-round ratios (a slow minute hits
both members of a pair). Memory is measured in a fresh process per variant: the peak of live tensor bytes during a
warm call (the ratio's figure), and beside it the RSS growth of the first call. The JSON records what the numbers
depend on: machine, date, library versions, thread count and the malloc setting.
"""

import argparse
import datetime
import gc
import itertools
import json
import multiprocessing
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
from torch.profiler import ProfilerActivity, profile

from hfzoo.core.files import write_atomic
from hfzoo.integrations.transformers import attn_implementation

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS_DIR = REPO_ROOT / "benchmarks" / "results"
SHARED_DIR = REPO_ROOT.parent / "shared"  # the real data sets, beside the repository (../shared/data)
THREADS = 2

# glibc hands freed memory back to the OS and re-faults it on the next step (15-35% of a CPU training step here);
# thresholds of 16 GiB keep the pages mapped. glibc reads these only at process start.
MALLOC_TUNED = {"MALLOC_MMAP_THRESHOLD_": "17179869184", "MALLOC_TRIM_THRESHOLD_": "17179869184"}
MALLOC_SETTINGS = ("tuned", "default")


def ensure_malloc_setting(setting: str) -> None:
    """Re-execute the running script so that glibc starts with the malloc thresholds of `setting`.

    `tuned` sets both thresholds (the recipes' setting), `default` removes them (glibc's own behaviour). Returns
    without re-executing when the environment already matches.
    """
    if setting not in MALLOC_SETTINGS:
        raise ValueError(f"malloc setting {setting!r} is not one of {', '.join(MALLOC_SETTINGS)}.")
    if current_malloc_setting()["name"] == setting:
        return
    env = {key: value for key, value in os.environ.items() if key not in MALLOC_TUNED}
    if setting == "tuned":
        env.update(MALLOC_TUNED)
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *sys.argv], env)


def current_malloc_setting() -> dict:
    """The malloc thresholds this process started with, named `tuned`, `default` or `custom`."""
    values = {key: os.environ.get(key) for key in MALLOC_TUNED}
    if values == MALLOC_TUNED:
        name = "tuned"
    elif not any(values.values()):
        name = "default"
    else:
        name = "custom"
    return {"name": name, **values}


def environment() -> dict:
    """What the numbers depend on, for the JSON: machine, date, versions, threads, malloc, code revision."""
    import transformers

    cpu_model = next(
        (line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
         if line.startswith("model name")),
        platform.processor(),
    )
    return {
        "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "cpu": cpu_model,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name() if torch.cuda.is_initialized() else None,
        "malloc": current_malloc_setting(),
        "git": _git_revision(),
        "load_average": os.getloadavg(),
    }


def _git_revision() -> dict:
    """Commit of the checkout and whether `hfzoo/` had uncommitted changes (others edit the same tree)."""

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=REPO_ROOT, capture_output=True, text=True).stdout.strip()

    try:
        return {"commit": git("rev-parse", "HEAD"), "hfzoo_dirty": bool(git("status", "--porcelain", "hfzoo"))}
    except OSError:
        return {"commit": None, "hfzoo_dirty": None}


# ----------------------------------------------------------------------------------------------- timing
@dataclass
class Variant:
    """One thing to time: `run()` processes `units` items (tokens) and is called once per round."""

    name: str
    run: Callable[[], object]
    units: int


@dataclass
class Group:
    """Variants that are compared with each other, e.g. hfzoo and native on the same figure."""

    name: str
    variants: list[Variant]


class Timings(dict):
    """Seconds per call, `{group: {variant: [one value per round]}}`, and the CPU seconds of the same calls.

    `cpu_seconds` is this process's CPU time (all threads): on a quiet machine a two-thread training step uses
    close to 2 CPU-seconds per second; much less means the cores were shared with other work.
    """

    def __init__(self, groups: list[Group]):
        super().__init__({group.name: {variant.name: [] for variant in group.variants} for group in groups})
        self.cpu_seconds = {group.name: {variant.name: [] for variant in group.variants} for group in groups}

    def cpu_utilisation(self, group: str, variant: str) -> float:
        """Median over rounds of CPU seconds per wall-clock second."""
        pairs = zip(self.cpu_seconds[group][variant], self[group][variant])
        return statistics.median(cpu / wall for cpu, wall in pairs)


def run_interleaved(groups: list[Group], rounds: int, warmup: int = 1) -> Timings:
    """Time every variant of every group once per round.

    Each variant is first called `warmup` times untimed (allocator, kernels, caches). Then every round visits every
    group and, inside a group, runs its variants in an order rotated by the round number, so no variant always
    runs first or right after a particular other one.
    """
    for group in groups:
        for variant in group.variants:
            for _ in range(warmup):
                variant.run()
    _synchronize()
    timings = Timings(groups)
    for round_index in range(rounds):
        for group in groups:
            shift = round_index % len(group.variants)
            for variant in group.variants[shift:] + group.variants[:shift]:
                cpu_start, start = time.process_time(), time.perf_counter()
                variant.run()
                _synchronize()
                timings[group.name][variant.name].append(time.perf_counter() - start)
                timings.cpu_seconds[group.name][variant.name].append(time.process_time() - cpu_start)
    return timings


def _synchronize() -> None:
    """A GPU runs asynchronously: a call's time ends when its kernels have finished, not when they were queued."""
    if torch.cuda.is_initialized():
        torch.cuda.synchronize()


def rate_summary(seconds: list[float], units: int) -> dict:
    """Throughput median (min-max) in units per second, and the raw per-round values."""
    rates = [units / value for value in seconds]
    return {"median": statistics.median(rates), "min": min(rates), "max": max(rates), "per_round": rates}


def paired_speed_ratio(candidate_seconds: list[float], reference_seconds: list[float]) -> dict:
    """Median (min-max) over rounds of candidate speed / reference speed, each round's pair measured together."""
    ratios = [reference / candidate for candidate, reference in zip(candidate_seconds, reference_seconds, strict=True)]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


# ----------------------------------------------------------------------------------------------- memory
def _read_status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"{field} missing from /proc/self/status")


def peak_tensor_mib(workload: Callable[[], object]) -> float:
    """Peak bytes of live CPU tensors allocated during one call of `workload`, in MiB.

    Summed from the profiler's allocation records in the order they happened: the CPU counterpart of
    `torch.cuda.max_memory_allocated`. Unlike RSS it does not depend on the malloc thresholds or on what the heap
    kept from earlier calls, so it compares two models' activation, cache and gradient memory exactly.
    """
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as recorded:
        workload()
    # Records of one timestamp keep their recorded order (a stable sort): an allocation before its free.
    records = sorted(
        ((event.start_ns(), event.nbytes()) for event in recorded.profiler.kineto_results.events()
         if event.name() == "[memory]"),
        key=lambda record: record[0],
    )
    live = itertools.accumulate(nbytes for _, nbytes in records)
    return max(live, default=0) / 2**20


def _peak_memory_in_child(probe: Callable[..., Callable[[], object]], args: tuple) -> dict:
    """Runs in the fresh process: build with `probe(*args)`, then measure only the workload it returns.

    The first call's RSS growth includes one-time allocations (thread pools, kernel caches, lazily built
    state); the second, warm call gives the tensor peak that the ratios use.
    """
    torch.set_num_threads(THREADS)
    workload = probe(*args)
    gc.collect()
    # Writing 5 to clear_refs resets the RSS high-water mark (VmHWM) to the current RSS (Linux >= 4.0).
    Path("/proc/self/clear_refs").write_text("5")
    baseline = _read_status_kib("VmRSS")
    workload()
    peak = _read_status_kib("VmHWM")
    return {
        "peak_tensor_mib": peak_tensor_mib(workload),
        "first_call_rss_growth_mib": (peak - baseline) / 1024,
        "baseline_rss_mib": baseline / 1024,
    }


class PeakMemoryProbe:
    """Measures the memory of a workload, each in its own fresh process.

    `measure(probe, *args)` runs `probe(*args)` in a new process forked from a server that has only imported the
    libraries: `probe` builds the model and inputs and returns the workload. The result holds the peak of live
    tensor bytes during a warm call (activations, gradients, caches and temporaries; weights, inputs and optimizer
    state allocated by the first call excluded) and the RSS growth of the first call. Forking from that server gives
    every variant the same clean heap without paying the library import again per measurement. `probe` must be a
    module-level function.
    """

    def __init__(self, preload: tuple[str, ...] = ("torch", "transformers")):
        context = multiprocessing.get_context("forkserver")
        context.set_forkserver_preload(list(preload))
        self._pool = context.Pool(processes=1, maxtasksperchild=1)

    def measure(self, probe: Callable[..., Callable[[], object]], *args) -> dict:
        return self._pool.apply(_peak_memory_in_child, (probe, args))

    def close(self) -> None:
        self._pool.close()
        self._pool.join()

    def __enter__(self) -> "PeakMemoryProbe":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


# ----------------------------------------------------------------------------------------------- hfzoo vs native
# Every benchmark compares an hfzoo preset ("hfzoo") with the native transformers model of the same shape ("native").
VARIANTS = ("hfzoo", "native")


def parameter_count(model: torch.nn.Module) -> int:
    return sum(parameter.numel() for parameter in model.parameters())


def training_workload(model: torch.nn.Module, batch: dict[str, torch.Tensor], steps: int) -> Callable[[], None]:
    """`steps` optimizer steps (forward, backward, AdamW) on one fixed batch that carries its `labels`."""
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    batch = {key: value.to(model.device) for key, value in batch.items()}

    def run() -> None:
        model.train()
        for _ in range(steps):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

    return run


def measure_speed(
    model_names: list[str],
    build: Callable[[str, str], torch.nn.Module],
    figures: list[str],
    make_workload: Callable[[torch.nn.Module, str], Callable[[], object]],
    tokens: Callable[[str], int],
    args,
) -> list[dict]:
    """Every (model, figure) is a group of the two variants, timed interleaved; one result row per group.

    Each group times its own pair, `build(model_name, variant)` (seeded: the same weights in every group). Sharing
    one model across figures would put a mode switch inside the timed calls of whichever figure follows one of the
    other mode, and the CPU layouts hfzoo applies (`hfzoo.core.cpu_layout`) make `train()`/`eval()` move weights:
    `measure_mode_switch` times that apart.
    """
    groups = []
    for model_name in model_names:
        for figure in figures:
            pair = {variant: build(model_name, variant) for variant in VARIANTS}
            variants = [Variant(variant, make_workload(pair[variant], figure), tokens(figure)) for variant in VARIANTS]
            groups.append(Group(name=f"{model_name}/{figure}", variants=variants))
    timings = run_interleaved(groups, rounds=args.rounds, warmup=args.warmup)
    rows = []
    for group in groups:
        model_name, figure = group.name.split("/")
        times, units = timings[group.name], group.variants[0].units
        row = {"model": model_name, "figure": figure, "unit": "tokens/s"}
        for variant in VARIANTS:
            row[variant] = {
                **rate_summary(times[variant], units), "cpu_utilisation": timings.cpu_utilisation(group.name, variant),
            }
        row["ratio"] = paired_speed_ratio(times["hfzoo"], times["native"])
        rows.append(row)
    return rows


def measure_mode_switch(models: dict[str, dict[str, torch.nn.Module]], repeats: int = 5) -> dict:
    """Milliseconds of `model.eval()` followed by `model.train()`, median (min-max) of `repeats`, per variant.

    What a training loop pays per evaluation on top of the evaluation itself: hfzoo moves its weights between the
    training and the inference layout (`hfzoo.core.cpu_layout.ModeFollowingLinear`), a native model only sets flags.
    """
    switch = {}
    for model_name, pair in models.items():
        switch[model_name] = {}
        for variant, model in pair.items():
            model.train()
            milliseconds = []
            for _ in range(repeats):
                start = time.perf_counter()
                model.eval()
                model.train()
                milliseconds.append(1e3 * (time.perf_counter() - start))
            summary = {"median": statistics.median(milliseconds), "min": min(milliseconds), "max": max(milliseconds)}
            switch[model_name][variant] = summary
    return switch


def measure_memory(
    probe: Callable, model_names: list[str], figures: list[str], args, preload: tuple[str, ...]
) -> list[dict]:
    """Peak tensor memory of each (model, figure, variant), each in its own fresh process (`probe` builds it there).

    `probe(model_name, variant, figure, args)` must be a module-level function returning the workload. The tensor
    peak repeats exactly; the first-call RSS growth beside it differed by up to ~15% between runs here, so each is
    measured `args.memory_repeats` times, alternating the variants, and medians (min-max) are reported.
    """
    repeats = getattr(args, "memory_repeats", 1)
    rows = []
    with PeakMemoryProbe(preload=preload) as memory:
        for model_name in model_names:
            for figure in figures:
                runs = {variant: [] for variant in VARIANTS}
                for _ in range(repeats):
                    for variant in VARIANTS:
                        runs[variant].append(memory.measure(probe, model_name, variant, figure, args))
                peaks = {variant: _median_peak(measured) for variant, measured in runs.items()}
                rows.append({
                    "model": model_name,
                    "figure": f"memory_{figure}",
                    "unit": "MiB peak tensor memory",
                    "hfzoo": peaks["hfzoo"],
                    "native": peaks["native"],
                    "ratio": {"median": peaks["native"]["peak_tensor_mib"] / peaks["hfzoo"]["peak_tensor_mib"]},
                })
    return rows


def _median_peak(measured: list[dict]) -> dict:
    tensor = [run["peak_tensor_mib"] for run in measured]
    rss = [run["first_call_rss_growth_mib"] for run in measured]
    return {
        "peak_tensor_mib": statistics.median(tensor),
        "min": min(tensor),
        "max": max(tensor),
        "first_call_rss_growth_mib": {"median": statistics.median(rss), "min": min(rss), "max": max(rss)},
        "baseline_rss_mib": statistics.median(run["baseline_rss_mib"] for run in measured),
    }


def check_parameters(models: dict[str, dict[str, torch.nn.Module]]) -> dict:
    """Assert each pair has the same number of parameters; return both counts and the native class, for the table
    and the JSON."""
    parameters = {}
    for model_name, pair in models.items():
        counts = {variant: parameter_count(model) for variant, model in pair.items()}
        if counts["native"] != counts["hfzoo"]:
            raise AssertionError(f"{model_name} and its native twin differ in size: {counts}")
        parameters[model_name] = {**counts, "native_class": type(pair["native"]).__name__}
    return parameters


def add_common_arguments(parser: argparse.ArgumentParser, output: Path) -> None:
    """The flags every hfzoo-vs-native comparison shares: rounds, warm-up, steps, memory, malloc, seed, output."""
    parser.add_argument("--preset-size", default="small", help="preset size to compare (tiny, small, base)")
    parser.add_argument("--rounds", type=int, default=8, help="timed rounds (each runs every variant once)")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls per variant before the rounds")
    parser.add_argument("--steps", type=int, default=3, help="training steps per timed call")
    parser.add_argument("--batch-size", type=int, default=8, help="training batch size")
    parser.add_argument("--no-memory", dest="memory", action="store_false", help="skip the peak-memory processes")
    parser.add_argument("--memory-repeats", type=int, default=3, help="fresh processes per memory figure and variant")
    parser.add_argument("--malloc", choices=MALLOC_SETTINGS, default="tuned",
                        help="glibc malloc thresholds to run under (the script re-executes itself to apply them)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--output", type=Path, default=output)


# ----------------------------------------------------------------------------------------------- output
def format_rate(summary: dict) -> str:
    return f"{summary['median']:,.0f} ({summary['min']:,.0f}-{summary['max']:,.0f})"


def print_table(header: list[str], rows: list[list[str]]) -> None:
    widths = [max(len(str(row[i])) for row in [header, *rows]) for i in range(len(header))]
    for row in [header, ["-" * width for width in widths], *rows]:
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)))


def _format_peak(peak: dict) -> str:
    spread = f" ({peak['min']:,.1f}-{peak['max']:,.1f})" if "min" in peak and peak["min"] != peak["max"] else ""
    return f"{peak['peak_tensor_mib']:,.1f} MiB{spread}"


def print_results(parameters: dict, rows: list[dict]) -> None:
    """Parameter counts, then hfzoo, native and the ratio per figure (speed rows: CPU seconds per second too)."""
    for model_name, counts in parameters.items():
        print(f"{model_name}: hfzoo {counts['hfzoo']:,} parameters, {counts['native_class']} {counts['native']:,}")
    table = []
    for row in rows:
        if row["unit"] == "tokens/s":
            cells = [format_rate(row[variant]) for variant in VARIANTS]
            ratio = row["ratio"]
            ratio_text = f"{ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f})"
            cpu_use = "/".join(f"{row[variant].get('cpu_utilisation', float('nan')):.2f}" for variant in VARIANTS)
        else:
            cells = [_format_peak(row[variant]) for variant in VARIANTS]
            ratio_text, cpu_use = f"{row['ratio']['median']:.2f}x", ""
        table.append([row["model"], row["figure"], *cells, ratio_text, cpu_use])
    print_table(["model", "figure", "hfzoo", "native", "ratio (>1: hfzoo better)", "cpu s/s hfzoo/native"], table)


def report(
    benchmark: str,
    args,
    started: dict,
    models: dict,
    parameters: dict,
    rows: list[dict],
    mode_switch: dict | None = None,
) -> dict:
    """Print the table and write the JSON, with the load average at the end beside the one at the start."""
    # A load far above the two cores at either end means other work shared the machine: rerun.
    started["load_average_end"] = os.getloadavg()
    first_pair = next(iter(models.values()))
    payload = {
        "benchmark": benchmark,
        "environment": started,
        "settings": {key: shown_path(value) if isinstance(value, Path) else value for key, value in vars(args).items()},
        "attn_implementation": {variant: attn_implementation(first_pair[variant].config) for variant in VARIANTS},
        "parameters": parameters,
        "results": rows,
    }
    print_results(parameters, rows)
    if mode_switch:
        payload["mode_switch_ms"] = mode_switch
        for model_name, variants in mode_switch.items():
            costs = ", ".join(f"{variant} {summary['median']:.1f} ms" for variant, summary in variants.items())
            print(f"{model_name}: eval() + train() {costs}")
    print(f"load average: start {started['load_average']}, end {started['load_average_end']}")
    write_json(args.output, payload)
    print(f"wrote {args.output}")
    return payload


def shown_path(path: Path) -> str:
    """A path of the settings as the results record it: relative to the repository when inside it or in the shared
    folder beside it (`../shared/data/...`), else its name alone (the committed results hold no path of the machine
    that measured them)."""
    absolute = Path(os.path.abspath(path))
    if absolute.is_relative_to(REPO_ROOT):
        return absolute.relative_to(REPO_ROOT).as_posix()
    if absolute.is_relative_to(SHARED_DIR):
        return "../" + absolute.relative_to(REPO_ROOT.parent).as_posix()
    return path.name


def write_json(path: Path, payload: dict) -> None:
    write_atomic(path, json.dumps(payload, indent=2) + "\n")
