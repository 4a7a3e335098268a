"""Accuracy: the fraction of predictions equal to their reference."""

import evaluate

from .metric_info import INT_LABELS, metric_info


class Accuracy(evaluate.Metric):
    def _info(self):
        description = "Fraction of predictions equal to the reference label."
        return metric_info(description, "predictions, references: lists of int labels of equal length.", INT_LABELS)

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("accuracy needs at least one reference")
        return {"accuracy": sum(int(p == r) for p, r in zip(predictions, references)) / len(references)}
