"""Scaling out on one machine (issue 25 item 6): pretraining tokens/s with 1 and 2 processes, and checkpoint cost.

Throughput: the pretraining recipe itself, launched as users launch it (`python -m torch.distributed.run
--nproc_per_node N recipes/pretrain.py`, gloo on CPU), with each process on `--threads-per-process` threads and the
same per-process batch, so N processes do N times the work of one (weak scaling). tokens/s is the median of the
recipe's own `train` log records after the first (which includes start-up), summed over processes; scaling
efficiency = tokens/s with N processes / (N x tokens/s with one). `--sharding fsdp` adds rows that pass
`--sharding fsdp` to the recipe (FSDP2).

Checkpoints: hfzoo's own `save_checkpoint` / `load_checkpoint` (safetensors and JSON, the format a DDP run writes) of
a model with its AdamW state after one step, for each `--checkpoint-presets` preset: median seconds of
`--checkpoint-repeats` saves and loads, and the folder's size, against the parameter count.

    .venv/bin/python benchmarks/bench_scaling.py                      # full run
    .venv/bin/python benchmarks/bench_scaling.py --sharding ddp fsdp  # with FSDP rows
    .venv/bin/python benchmarks/bench_scaling.py --tiny               # smoke run
"""

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from accelerate import Accelerator
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.training.checkpointing import Progress, load_checkpoint, save_checkpoint
from hfzoo.training.logging import read_log

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_ROOT, RESULTS_DIR, ensure_malloc_setting, environment, print_table, write_json  # noqa: E402

RECIPE = REPO_ROOT / "recipes" / "pretrain.py"
TINY = ["--preset", "gpt-tiny", "--steps", "3", "--block-size", "32", "--batch-size", "2",
        "--checkpoint-presets", "gpt-tiny", "--checkpoint-repeats", "1"]  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tiny", action="store_true", help="smoke run: gpt-tiny, 3 steps, one checkpoint")
    parser.add_argument("--preset", default="gpt-small", help="the preset trained for tokens/s")
    parser.add_argument("--processes", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--sharding", nargs="+", default=["ddp"], choices=["ddp", "fsdp"])
    parser.add_argument("--threads-per-process", type=int, default=1)
    parser.add_argument("--steps", type=int, default=20, help="optimizer steps per run (the first is not counted)")
    parser.add_argument("--block-size", type=int, default=128)
    parser.add_argument("--batch-size", type=int, default=8, help="blocks per process per step")
    parser.add_argument("--checkpoint-presets", nargs="+", default=["gpt-tiny", "gpt-small", "gpt-base"])
    parser.add_argument("--checkpoint-repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULTS_DIR / "scaling.json")
    args = parser.parse_args(argv)
    return parser.parse_args([*TINY, *(argv if argv is not None else sys.argv[1:])]) if args.tiny else args


def run_recipe(args: argparse.Namespace, processes: int, sharding: str, output_dir: Path) -> dict:
    """One recipe launch; its tokens/s (all processes) from the log, and the launch's wall time."""
    launch = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(processes), str(RECIPE)]
    recipe = ["--preset", args.preset, "--objective", "clm", "--max_steps", str(args.steps), "--log_every", "1",
              "--eval_every", str(args.steps), "--eval_batches", "1", "--max_eval_samples", "50",
              "--save_every", str(args.steps), "--block_size", str(args.block_size),
              "--per_device_batch_size", str(args.batch_size), "--gradient_accumulation_steps", "1",
              "--vocab_size", "8192", "--tensorboard", "false", "--output_dir", str(output_dir)]  # fmt: skip
    if sharding == "fsdp":
        recipe += ["--sharding", "fsdp"]
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads_per_process), "HF_HUB_OFFLINE": "1",
           "TOKENIZERS_PARALLELISM": "false"}  # fmt: skip
    start = time.perf_counter()
    completed = subprocess.run([*launch, *recipe], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"the recipe failed ({sharding}, {processes} processes):\n{completed.stderr[-3000:]}")
    records = read_log(output_dir)
    rates = [record["tokens_per_s"] for record in records if record["event"] == "train"][1:]
    start_record = records[0]
    return {"tokens_per_s": {"median": statistics.median(rates), "min": min(rates), "max": max(rates)},
            "num_processes": start_record["num_processes"], "distributed_type": start_record["distributed_type"],
            "parameters": start_record["parameters"], "tokens_per_step": start_record["tokens_per_step"],
            "wall_s": wall}  # fmt: skip


def throughput_rows(args: argparse.Namespace, workdir: Path) -> list[dict]:
    rows = []
    for sharding in args.sharding:
        single = None
        for processes in args.processes:
            measured = run_recipe(args, processes, sharding, workdir / f"{sharding}-{processes}")
            if measured["num_processes"] != processes:
                raise RuntimeError(f"asked for {processes} processes, the recipe ran {measured['num_processes']}")
            if processes == 1:
                single = measured["tokens_per_s"]["median"]
            rate = measured["tokens_per_s"]["median"]
            efficiency = rate / (processes * single) if single else None
            rows.append({"figure": "train", "sharding": sharding, "processes": processes, "model": args.preset,
                         "unit": "tokens/s", **measured, "scaling_efficiency": efficiency})  # fmt: skip
    return rows


def checkpoint_row(preset: str, repeats: int, workdir: Path) -> dict:
    """Save and load times of a `preset` model with AdamW state after one step, in one process (an Accelerator of its
    own, so that the checkpoint holds this model only)."""
    accelerator = Accelerator(cpu=True)
    model = AutoModelForCausalLM.from_config(hfzoo.preset_config(preset))
    optimizer = torch.optim.AdamW(model.parameters())
    model, optimizer = accelerator.prepare(model, optimizer)
    ids = torch.randint(0, model.config.vocab_size, (1, 16))
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    saves, loads, size = [], [], 0
    for repeat in range(repeats):
        output_dir = workdir / f"checkpoint-{preset}-{repeat}"
        start = time.perf_counter()
        path = save_checkpoint(accelerator, output_dir, Progress(step=1), None, keep=1)
        saves.append(time.perf_counter() - start)
        start = time.perf_counter()
        load_checkpoint(accelerator, path)
        loads.append(time.perf_counter() - start)
        size = sum(file.stat().st_size for file in path.rglob("*") if file.is_file())
        shutil.rmtree(output_dir)
    return {"figure": "checkpoint", "model": preset, "parameters": sum(p.numel() for p in model.parameters()),
            "size_mib": size / 2**20, "save_s": _summary(saves), "load_s": _summary(loads)}  # fmt: skip


def _efficiency(row: dict) -> str:
    return "-" if row["scaling_efficiency"] is None else f"{row['scaling_efficiency']:.2f}"


def _summary(seconds: list[float]) -> dict:
    return {"median": statistics.median(seconds), "min": min(seconds), "max": max(seconds)}


def main(argv: list[str] | None = None) -> dict:
    args = parse_args(argv)
    ensure_malloc_setting("tuned")
    started = environment()
    with tempfile.TemporaryDirectory(prefix="bench-scaling-") as workdir:
        rows, notes = throughput_rows(args, Path(workdir)), []
        rows += [checkpoint_row(preset, args.checkpoint_repeats, Path(workdir)) for preset in args.checkpoint_presets]
    started["load_average_end"] = os.getloadavg()
    busiest = max(started["load_average"][0], started["load_average_end"][0])
    if busiest > os.cpu_count() / 2:  # the processes compared did not have the cores to themselves
        notes.append(f"Measured under load: a 1-minute load average of up to {busiest:.1f} on {os.cpu_count()} cores "
                     "(other work shared the machine), so these figures are not clean; rerun on a quiet machine.")
    print_table(["sharding", "processes", "model", "tokens/s", "scaling efficiency"],
                [[r["sharding"], str(r["processes"]), r["model"], f"{r['tokens_per_s']['median']:,.0f}",
                  _efficiency(r)] for r in rows if r["figure"] == "train"])  # fmt: skip
    print_table(["model", "parameters", "checkpoint MiB", "save s", "load s"],
                [[r["model"], f"{r['parameters']:,}", f"{r['size_mib']:.1f}", f"{r['save_s']['median']:.3f}",
                  f"{r['load_s']['median']:.3f}"] for r in rows if r["figure"] == "checkpoint"])  # fmt: skip
    print(f"load average: start {started['load_average']}, end {started['load_average_end']}")
    given = argv if argv is not None else sys.argv[1:]
    shown = [Path(value).name if before == "--output" else value for before, value in zip(["", *given], given)]
    command = " ".join(["python benchmarks/bench_scaling.py", *shown])  # no path of the measuring machine
    settings = {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}
    settings["output"] = args.output.name
    payload = {"benchmark": "scaling", "command": command, "environment": started, "settings": settings,
               "results": rows, "notes": notes}  # fmt: skip
    write_json(args.output, payload)
    print(f"wrote {args.output}")
    return payload


if __name__ == "__main__":
    main()
