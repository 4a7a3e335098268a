"""Matthews correlation coefficient (multi-class form of Gorodkin, 2004), the GLUE metric for CoLA."""

import evaluate
import numpy as np

from .metric_info import INT_LABELS, metric_info


class MatthewsCorrelation(evaluate.Metric):
    def _info(self):
        description = "Matthews correlation between predicted and reference labels, in [-1, 1]."
        return metric_info(description, "predictions, references: lists of int labels.", INT_LABELS)

    def _compute(self, predictions, references):
        labels = np.union1d(predictions, references)
        index = {label: i for i, label in enumerate(labels)}
        confusion = np.zeros((len(labels), len(labels)))
        for p, r in zip(predictions, references):
            confusion[index[r], index[p]] += 1
        t, p, c, s = confusion.sum(axis=1), confusion.sum(axis=0), np.trace(confusion), confusion.sum()
        denominator = np.sqrt((s**2 - p @ p) * (s**2 - t @ t))
        return {"matthews_correlation": 0.0 if denominator == 0 else float((c * s - t @ p) / denominator)}
