"""The Tiny Shakespeare benchmark runs the pretraining recipe end to end in its tiny mode and writes the JSON that
benchmarks/report.py renders (the loss and the time are not asserted beyond being sane: a few steps, shared CPU)."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]


def run_bench(shared_data: Path, output: Path, *options: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(REPO_ROOT / "benchmarks" / "bench_shakespeare.py"), "--tiny", "--output", str(output),
         "--data", str(shared_data / "tinyshakespeare" / "input.txt"), *options],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip


def test_tiny_run_writes_the_loss_curve_and_both_rows(shared_data, tmp_path):
    output = tmp_path / "shakespeare.json"
    completed = run_bench(shared_data, output)
    assert completed.returncode == 0, completed.stderr[-3000:]
    payload = json.loads(output.read_text())
    settings, run = payload["settings"], payload["run"]
    assert settings["tokenizer_kind"] == "char" and settings["adam_beta2"] == 0.99 and settings["block_size"] == 64
    assert settings["characters"]["train"] == 9 * settings["characters"]["validation"]  # the 90/10 character split
    assert [point["step"] for point in run["curve"]] == [3, 6] and run["steps"] == 6
    losses = [point["validation_loss"] for point in run["curve"]]
    assert losses[-1] < losses[0] < 4.3  # below uniform over the ~69-token vocabulary (ln 69 = 4.23) after 3 steps
    assert 0 < run["train_s"] < run["wall_s"]
    rows = {row["figure"]: row for row in payload["results"]}
    loss_row = rows["validation loss (lower is better)"]
    assert loss_row["hfzoo"]["median"] == losses[-1] and loss_row["ratio"]["median"] == 1.88 / losses[-1]
    assert "validation loss" in completed.stdout
    assert output.with_suffix(".png").read_bytes().startswith(b"\x89PNG")  # the loss against training seconds


@pytest.mark.slow  # a second side-by-side run, 40 s in CI; the tiny run above covers the benchmark
def test_a_model_option_changes_the_model_and_names_itself(shared_data, tmp_path):
    output = tmp_path / "shakespeare_rotary.json"
    completed = run_bench(shared_data, output, "--model_option", "position_embedding=rotary")
    assert completed.returncode == 0, completed.stderr[-3000:]
    payload = json.loads(output.read_text())
    assert payload["settings"]["model.position_embedding"] == "rotary"
    assert payload["results"][0]["model"] == "gpt-tiny (position_embedding=rotary), char"
    assert "--model_option position_embedding=rotary" in payload["command"]

    refused = run_bench(shared_data, tmp_path / "bad.json", "--model_option", "position_embedding=spiral")
    assert refused.returncode != 0 and not (tmp_path / "bad.json").exists()
    assert "position_embedding='spiral' is not supported" in refused.stderr
