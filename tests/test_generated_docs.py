"""Generated documents are up to date with what generates them: preset cards and the benchmark report."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("script", ["model_cards/generate_preset_cards.py", "benchmarks/report.py"])
def test_generated_document_is_current(script):
    result = subprocess.run([sys.executable, script, "--check"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr


def test_every_preset_has_a_card():
    import hfzoo

    cards = {p.stem for p in (ROOT / "model_cards" / "presets").glob("*.md")}
    assert cards == set(hfzoo.list_presets())
