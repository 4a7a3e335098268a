"""Matthews correlation coefficient (multi-class form of Gorodkin, 2004), the GLUE metric for CoLA."""

import datasets
import evaluate
import numpy as np


class MatthewsCorrelation(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Matthews correlation between predicted and reference labels, in [-1, 1].",
            citation="",
            inputs_description="predictions, references: lists of int labels.",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        labels = np.union1d(predictions, references)
        index = {label: i for i, label in enumerate(labels)}
        confusion = np.zeros((len(labels), len(labels)))
        for p, r in zip(predictions, references):
            confusion[index[r], index[p]] += 1
        t, p, c, s = confusion.sum(axis=1), confusion.sum(axis=0), np.trace(confusion), confusion.sum()
        denominator = np.sqrt((s**2 - p @ p) * (s**2 - t @ t))
        return {"matthews_correlation": 0.0 if denominator == 0 else float((c * s - t @ p) / denominator)}
