"""model_cards/generate_speedrun_ablation.py at a tiny scale: each variant's steps come from its calibration's speed,
made on a core of its own with one thread, the last variant carries every change before it, and the card shows each
finished variant's figures and regenerates from the records it archived once the run folders are gone."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest
from tests.helpers.paths import REPO

from hfzoo.training.logging import steps_filling

sys.path.insert(0, str(REPO / "model_cards"))
import generate_speedrun_ablation as ablation  # noqa: E402


# 4 recipe processes, two at a time; the switches' own tests (tests/models/test_speedrun_switches.py) run in make test
@pytest.mark.slow
def test_variants_fill_the_budget_accumulate_their_changes_and_card(shared_data, tmp_path):
    runs, card = tmp_path / "runs", tmp_path / "card"
    argv = ["run", str(runs), "--minutes", "0.05", "--characters", "40000", "--variants", "baseline", "muon"]
    argv += ["--jobs", "2"]
    assert ablation.main(argv) == 0
    for name in ("baseline", "muon"):
        log = [json.loads(line) for line in (runs / name / "log.jsonl").read_text().splitlines()]
        end = next(record for record in log if record["event"] == "end")
        assert end["step"] == steps_filling(0.05, runs / f"{name}-calibration")
        for run in (name, f"{name}-calibration"):
            machine = json.loads((runs / run / "run_record.json").read_text())["machine"]
            assert (machine["cores"], machine["torch_threads"]) == (1, 1), run
    command = json.loads((runs / "muon" / "run_record.json").read_text())["command"]
    for _, _, change in ablation.VARIANTS[1:]:
        assert " ".join(change) in command
    assert ablation.main(["card", str(runs), str(card)]) == 0
    text, results = (card / "README.md").read_text(), json.loads((card / "results.json").read_text())["variants"]
    assert set(results) == {"baseline", "muon"} and "| rotary | rotary positions | not run yet |" in text
    delta = results["muon"]["validation_loss"] - results["baseline"]["validation_loss"]
    assert f"| {results['muon']['validation_loss']:.4f} | {delta:+.4f} |" in text
    assert "Each run had one core and one thread" in text
    assert all(point["train_s"] is not None for point in results["muon"]["curve"])
    assert re.search(rf"(?<![./]){re.escape(str(tmp_path))}", text) is None  # relative paths only ("../../tmp/...")
    shutil.rmtree(runs)
    assert ablation.main(["card", str(runs), str(card)]) == 0
    assert (card / "README.md").read_text() == text


def test_an_evaluation_between_two_logged_steps_is_placed_at_the_time_between_them():
    """The card's curves put each evaluation at its training seconds; runs evaluate every steps // 8, which is rarely
    a logging step."""
    from recipe_runs import elapsed_at

    logged = [(10, 1.0), (20, 3.0), (30, 4.0)]
    assert [elapsed_at(logged, step) for step in (10, 15, 28, 30)] == [1.0, 2.0, 3.8, 4.0]
    assert elapsed_at(logged, 5) is None and elapsed_at(logged, 31) is None
