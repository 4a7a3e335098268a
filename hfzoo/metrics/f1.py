"""F1 score: binary (of `pos_label`), macro (unweighted mean over labels) or micro."""

import evaluate
import numpy as np

from .metric_info import INT_LABELS, metric_info


class F1(evaluate.Metric):
    def _info(self):
        description = "F1 = 2PR/(P+R); average='binary' (default, pos_label=1), 'macro' or 'micro'."
        return metric_info(description, "predictions, references: lists of int labels; average, pos_label.", INT_LABELS)

    def _compute(self, predictions, references, average="binary", pos_label=1):
        predictions, references = np.asarray(predictions), np.asarray(references)
        labels = np.union1d(predictions, references)

        def counts(label):
            tp = np.sum((predictions == label) & (references == label))
            return tp, np.sum(predictions == label) - tp, np.sum(references == label) - tp

        def f1(tp, fp, fn):
            return 0.0 if tp == 0 else float(2 * tp / (2 * tp + fp + fn))

        if average == "binary":
            return {"f1": f1(*counts(pos_label))}
        if average == "macro":
            return {"f1": float(np.mean([f1(*counts(label)) for label in labels]))}
        if average == "micro":
            return {"f1": f1(*np.sum([counts(label) for label in labels], axis=0))}
        raise ValueError(f"average={average!r} is not supported; use 'binary', 'macro' or 'micro'")
