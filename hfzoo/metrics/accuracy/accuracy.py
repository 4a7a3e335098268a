"""Accuracy: the fraction of predictions equal to their reference."""

import datasets
import evaluate


class Accuracy(evaluate.Metric):
    def _info(self):
        return evaluate.MetricInfo(
            description="Fraction of predictions equal to the reference label.",
            citation="",
            inputs_description="predictions, references: lists of int labels of equal length.",
            features=datasets.Features({"predictions": datasets.Value("int64"), "references": datasets.Value("int64")}),
        )

    def _compute(self, predictions, references):
        if not references:
            raise ValueError("accuracy needs at least one reference")
        return {"accuracy": sum(int(p == r) for p, r in zip(predictions, references)) / len(references)}
