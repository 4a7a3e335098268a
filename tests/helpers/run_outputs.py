"""Reading what a run leaves in its output folder: its logged losses, weights, metrics and predictions."""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from hfzoo.training.logging import read_log


def train_losses(output_dir: Path) -> dict[int, float]:
    """step -> the training loss the run logged."""
    return {r["step"]: r["loss"] for r in read_log(output_dir) if r["event"] == "train"}


def weights(output_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(output_dir / "model.safetensors")


def max_weight_difference(a: Path, b: Path) -> float:
    """The largest difference between two runs' saved models, which must hold the same tensors."""
    wa, wb = weights(a), weights(b)
    assert wa.keys() == wb.keys()
    return max((wa[k] - wb[k]).abs().max().item() for k in wa)


def assert_same_tensors(a: Path, b: Path) -> None:
    """Two safetensors files hold the same names and bit-identical tensors."""
    first, second = load_file(a), load_file(b)
    assert first.keys() == second.keys()
    differ = [k for k in first if not torch.equal(first[k], second[k])]
    assert not differ, differ


def replace_with_other_weights(file: Path) -> None:
    """Put other weights of the same names, shapes and file size in the safetensors `file` (each tensor plus one):
    another model or adapter of the same architecture, trained otherwise, under the same path."""
    with safe_open(file, "pt") as handle:
        metadata = handle.metadata()
    save_file({name: tensor + 1 for name, tensor in load_file(file).items()}, file, metadata)


def read_run(output_dir: Path) -> tuple[dict, list[dict]]:
    """A task run's metrics.json and predictions.jsonl."""
    metrics = json.loads((output_dir / "metrics.json").read_text())
    predictions = [json.loads(line) for line in (output_dir / "predictions.jsonl").read_text().splitlines()]
    return metrics, predictions
