"""Entity-level precision/recall/F1 for IOB1/IOB2 tag sequences, as the CoNLL-2003 evaluation and seqeval.

An entity counts as correct only if its type, start and end all match.
"""

import datasets
import evaluate

from .metric_info import metric_info


def entities(tags: list[str]) -> set[tuple[str, int, int]]:
    """(type, start, end) spans; an `I-X` that does not continue an `X` entity starts a new one (conlleval)."""
    spans, start, kind = set(), None, None
    for i, tag in enumerate([*tags, "O"]):
        prefix, _, label = tag.partition("-")
        continues = prefix == "I" and label == kind
        if kind is not None and not continues:
            spans.add((kind, start, i))
            kind = None
        if prefix in ("B", "I") and not continues:
            start, kind = i, label
    return spans


class Seqeval(evaluate.Metric):
    def _info(self):
        tags = datasets.Sequence(datasets.Value("string"))
        return metric_info(
            "Entity-level precision, recall, F1 and token accuracy over IOB tag sequences.",
            "predictions, references: lists of tag-string sequences.",
            datasets.Features({"predictions": tags, "references": tags}),
            citation="Tjong Kim Sang & De Meulder (2003), CoNLL-2003 shared task.",
        )

    def _compute(self, predictions, references):
        found = correct = gold = tokens = right = 0
        for predicted, reference in zip(predictions, references):
            if len(predicted) != len(reference):
                raise ValueError(f"prediction has {len(predicted)} tags but its reference has {len(reference)}")
            predicted_spans, gold_spans = entities(predicted), entities(reference)
            found, gold, correct = found + len(predicted_spans), gold + len(gold_spans), correct + len(predicted_spans & gold_spans)
            tokens, right = tokens + len(reference), right + sum(p == r for p, r in zip(predicted, reference))
        precision = correct / found if found else 0.0
        recall = correct / gold if gold else 0.0
        f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
        return {
            "overall_precision": precision,
            "overall_recall": recall,
            "overall_f1": f1,
            "overall_accuracy": right / tokens if tokens else 0.0,
        }
