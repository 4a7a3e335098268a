"""Fixtures of the card tests: model_cards/ is importable, as its scripts run from there."""

from __future__ import annotations

import sys

import pytest
from tests.helpers.paths import REPO
from tests.helpers.result_grid import TINY

sys.path.insert(0, str(REPO / "model_cards"))
import generate_finetune_results as results


@pytest.fixture
def tiny_run_lengths(monkeypatch):
    """The reported run lengths would take an hour; the same configs with tiny overrides take seconds."""
    lengths = {task: (config, [*length, *TINY]) for task, (config, length) in results.TASKS.items()}
    monkeypatch.setattr(results, "TASKS", lengths)
