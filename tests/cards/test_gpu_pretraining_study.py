"""model_cards/gpu_pretraining_study.py in its tiny CPU mode: a calibration run sets the pretraining's steps, the
study pretrains and fine-tunes on CoNLL-2003 and SST-2-1k with the device named, and the card is written."""

from __future__ import annotations

import json
import re
import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "model_cards"))
import gpu_pretraining_study  # noqa: E402

from hfzoo.training.logging import steps_filling  # noqa: E402


@pytest.mark.slow  # 6 recipe processes; tests/cards/test_pretraining_study.py runs the same study's machinery
def test_the_tiny_mode_calibrates_pretrains_fine_tunes_and_writes_the_card(shared_data, tmp_path):
    runs, card = tmp_path / "runs", tmp_path / "card"
    assert gpu_pretraining_study.main([str(runs), "--card_dir", str(card), "--tiny"]) == 0
    assert json.loads((runs / "calibration" / "run_record.json").read_text())["device"].endswith("(cpu)")
    results = json.loads((card / "results.json").read_text())
    steps = results["pretraining"]["mlm"]["training"]["steps"]
    assert steps == steps_filling(0.05, runs / "calibration") >= 10
    hour, half = (steps_filling(minutes, runs / "calibration") for minutes in (60, 30))
    assert abs(hour - 2 * half) <= 1 and hour > steps  # the steps grow with the budget at the measured speed
    assert set(results["finetuning"]) == {"conll2003", "sst2-1k"}
    assert set(results["finetuning"]["conll2003"]) == {"mlm", "scratch"}
    text = (card / "README.md").read_text()
    assert "- conll2003: mlm >= scratch + 10 points: " in text
    assert re.search(rf"(?<![./]){re.escape(str(tmp_path))}", text) is None  # relative paths only ("../../tmp/...")
