"""The masked-LM pretraining benchmark trains hfzoo's recipe and transformers' Trainer side by side in its tiny mode
and writes the JSON that benchmarks/report.py renders (losses and times are not asserted beyond being sane: a few
steps of a tiny encoder on a shared CPU)."""

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from tests.helpers.scripts import load_script

REPO_ROOT = Path(__file__).resolve().parents[1]
BENCH = REPO_ROOT / "benchmarks" / "bench_mlm_pretraining.py"


@pytest.mark.slow  # 40-60 s on a 2-core CPU: it tests the benchmark script, not hfzoo (CI runs it)
def test_tiny_run_trains_both_sides_on_the_same_blocks_and_compares_their_curves(shared_data, tmp_path):
    output = tmp_path / "mlm_pretraining.json"
    completed = subprocess.run(
        [sys.executable, str(BENCH), "--tiny", "--output", str(output), "--data", str(shared_data / "enwiki")],
        cwd=REPO_ROOT, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert completed.returncode == 0, completed.stderr[-3000:]
    text = output.read_text()
    payload = json.loads(text)
    hfzoo, native = payload["runs"]["hfzoo"], payload["runs"]["native"]
    settings = payload["settings"]
    assert settings["recipe"]["objective"] == "mlm" and settings["recipe"]["block_size"] == 128
    assert (settings["train_articles"], settings["validation_articles"], settings["vocab_size"]) == (20, 5, 512)

    # Evaluated at the same steps (every 2 and at the last), with finite losses, after the same number of steps.
    assert [point["step"] for point in hfzoo["curve"]] == [point["step"] for point in native["curve"]] == [2, 4]
    assert hfzoo["steps"] == native["steps"] == 4
    for run in (hfzoo, native):
        losses = [point["validation_loss"] for point in run["curve"]]
        assert all(math.isfinite(loss) and 0 < loss for loss in losses) and run["validation_loss"] == losses[-1]
        assert 0 < run["curve"][0]["train_s"] <= run["curve"][-1]["train_s"] <= run["train_s"] < run["wall_s"]

    # The same model size and the same blocks on both sides; the ratios are those of the numbers above.
    parameters = payload["parameters"]
    assert parameters["hfzoo"] == parameters["native"] > 0 and parameters["native_class"] == "BertForMaskedLM"
    assert hfzoo["train_blocks"] == native["train_blocks"] > 0
    assert payload["ratios"] == {
        "final_loss": hfzoo["validation_loss"] / native["validation_loss"],
        "loop_speed": native["train_s"] / hfzoo["train_s"],
        "process_speed": native["wall_s"] / hfzoo["wall_s"],
    }
    # No path of this machine: the output by its name, the data beside the repository as ../shared.
    command = "python benchmarks/bench_mlm_pretraining.py --tiny --output mlm_pretraining.json --data ../shared/data/enwiki"
    assert payload["command"] == command and str(tmp_path) not in text
    assert "final loss hfzoo / native" in completed.stdout
    assert output.with_suffix(".png").read_bytes().startswith(b"\x89PNG")  # both curves against seconds and steps

    report = load_script("benchmarks/report.py")
    section = report.render_result_file(output)
    assert f"| final validation loss | nats/token | {hfzoo['validation_loss']:.4f} |" in section
    assert section.count("\n| 2 |") == 1 and section.count("\n| 4 |") == 1  # the curves, step by step
    headline = report.headline({output: payload})
    assert f"final validation loss, hfzoo / Trainer | {payload['ratios']['final_loss']:.3f}x | <= 1.0x" in headline
    assert "training loop speed, Trainer s / hfzoo s" in headline
