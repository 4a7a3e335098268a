"""The Tiny Shakespeare benchmark runs the pretraining recipe and nanoGPT's own train.py side by side in its tiny mode
and writes the JSON that benchmarks/report.py renders (the losses and the times are not asserted beyond being sane:
a few steps, shared CPU)."""

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


@pytest.mark.slow  # 25-40 s on a 2-core CPU: it tests the benchmark script, not hfzoo (CI runs it)
def test_tiny_run_measures_both_sides_in_the_same_run(shared_data, tmp_path):
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
    nanogpt = payload["nanogpt"]
    assert [point["step"] for point in nanogpt["curve"]] == [0, 3, 6]  # its own evaluations, parsed from its output
    assert all(0 < point["validation_loss"] < 4.5 for point in nanogpt["curve"]) and nanogpt["wall_s"] > 0
    assert "--n_embd=128" in settings["nanogpt_args"] and "--eval_iters=2" in settings["nanogpt_args"]
    rows = {row["figure"]: row for row in payload["results"]}
    loss_row, wall_row = rows["final validation loss (lower is better)"], rows["process wall time, start to exit"]
    theirs = nanogpt["curve"][-1]["validation_loss"]
    assert loss_row["hfzoo"]["median"] == losses[-1] and loss_row["nanoGPT (same run)"]["median"] == theirs
    assert payload["ratios"]["validation_loss"] == losses[-1] / theirs
    wall_ratio = payload["ratios"]["wall_s"]
    assert wall_ratio == run["wall_s"] / nanogpt["wall_s"] == pytest.approx(1 / wall_row["ratio"]["median"])
    assert payload["command"] == "python benchmarks/bench_shakespeare.py --tiny"  # no path of this machine
    assert "validation loss" in completed.stdout
    assert output.with_suffix(".png").read_bytes().startswith(b"\x89PNG")  # the loss against training seconds


@pytest.mark.slow  # a second side-by-side run, 40 s in CI
def test_model_and_recipe_options_change_the_run_and_name_themselves(shared_data, tmp_path):
    output = tmp_path / "shakespeare_speedrun.json"
    options = ["--model_option", "qk_norm=true", "--recipe_option", "preset=gpt-speedrun-tiny",
               "--recipe_option", "lr_schedule=wsd"]  # fmt: skip
    completed = run_bench(shared_data, output, *options)
    assert completed.returncode == 0, completed.stderr[-3000:]
    payload = json.loads(output.read_text())
    settings = payload["settings"]
    assert settings["preset"] == "gpt-speedrun-tiny" and settings["lr_schedule"] == "wsd"
    assert settings["model.qk_norm"] == "true"
    assert payload["results"][0]["model"] == "gpt-speedrun-tiny (qk_norm=true, lr_schedule=wsd), char"
    assert " ".join(options) in payload["command"]

    refused = run_bench(shared_data, tmp_path / "bad.json", "--model_option", "position_embedding=spiral")
    assert refused.returncode != 0 and not (tmp_path / "bad.json").exists()
    assert "position_embedding='spiral' is not supported" in refused.stderr
