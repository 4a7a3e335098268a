"""Local `evaluate` metric modules, loaded by path so that evaluation works with the network off.

`evaluate.load("accuracy")` fetches its script from the Hub; hfzoo ships the metrics its recipes use as
evaluate modules in this folder. `load_metric` prefers them and falls back to the Hub for other names.
"""

from pathlib import Path

import evaluate

METRICS_DIR = Path(__file__).resolve().parent
LOCAL_METRICS = tuple(sorted(p.name for p in METRICS_DIR.iterdir() if (p / f"{p.name}.py").is_file()))


def load_metric(name: str, **kwargs) -> evaluate.EvaluationModule:
    """`evaluate.load` for a local hfzoo metric by name, or any other name/path (which may need the Hub)."""
    if name in LOCAL_METRICS:
        return evaluate.load(str(METRICS_DIR / name), **kwargs)
    return evaluate.load(name, **kwargs)
