"""What every local metric declares to `evaluate`, in one place.

Each metric module imports this file relatively; `evaluate.load(path)` copies such sibling imports next to the
script in its module cache, so the metrics still load by path with the network off.
"""

import datasets
import evaluate

INT_LABELS = datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")})


def metric_info(description: str, inputs_description: str, features: datasets.Features, citation: str = "") -> evaluate.MetricInfo:
    return evaluate.MetricInfo(
        description=description, citation=citation, inputs_description=inputs_description, features=features
    )
