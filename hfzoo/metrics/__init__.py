"""Local `evaluate` metric modules, loaded by path so that evaluation works with the network off.

`evaluate.load("accuracy")` fetches its script from the Hub; hfzoo ships the metrics its recipes use as
evaluate scripts in this folder (one file each, sharing `metric_info.py`). `load_metric` prefers them and falls
back to the Hub for other names. `evaluate` is imported when a metric is loaded: importing it takes ~0.9 s on a
2-core CPU, which every process that imports the task modules (the pretraining recipe too) paid.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import evaluate

METRICS_DIR = Path(__file__).resolve().parent
_NOT_METRICS = {"__init__", "metric_info"}
LOCAL_METRICS = tuple(sorted(p.stem for p in METRICS_DIR.glob("*.py") if p.stem not in _NOT_METRICS))


def load_metric(name: str, **kwargs) -> evaluate.EvaluationModule:
    """`evaluate.load` for a local hfzoo metric by name, or any other name/path (which may need the Hub)."""
    import evaluate

    if name in LOCAL_METRICS:
        return evaluate.load(str(METRICS_DIR / f"{name}.py"), **kwargs)
    return evaluate.load(name, **kwargs)
