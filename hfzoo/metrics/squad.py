"""SQuAD v1.1 exact match and token F1, with the official answer normalisation, maximised over references."""

import collections
import re
import string

import datasets
import evaluate

from .metric_info import metric_info


def normalize_answer(text: str) -> str:
    """Lower-case, drop punctuation and the articles a/an/the, collapse whitespace (official v1.1 script)."""
    text = "".join(ch for ch in text.lower() if ch not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def token_f1(prediction: str, reference: str) -> float:
    predicted, gold = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((collections.Counter(predicted) & collections.Counter(gold)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(gold)
    return 2 * precision * recall / (precision + recall)


class Squad(evaluate.Metric):
    def _info(self):
        return metric_info(
            "SQuAD v1.1 exact_match and f1 (percentages), best over each question's reference answers.",
            "predictions: [{'id', 'prediction_text'}]; references: [{'id', 'answers': {'text': [...], 'answer_start': [...]}}].",
            datasets.Features(
                {
                    "predictions": {"id": datasets.Value("string"), "prediction_text": datasets.Value("string")},
                    "references": {
                        "id": datasets.Value("string"),
                        "answers": datasets.Sequence(
                            {"text": datasets.Value("string"), "answer_start": datasets.Value("int32")}
                        ),
                    },
                }
            ),
            citation="Rajpurkar et al. (2016), SQuAD: 100,000+ Questions for Machine Comprehension of Text.",
        )

    def _compute(self, predictions, references):
        answers = {r["id"]: r["answers"]["text"] for r in references}
        exact = f1 = 0.0
        for prediction in predictions:
            gold = answers[prediction["id"]]
            text = prediction["prediction_text"]
            exact += max(float(normalize_answer(text) == normalize_answer(g)) for g in gold)
            f1 += max(token_f1(text, g) for g in gold)
        count = len(predictions)
        return {"exact_match": 100.0 * exact / count, "f1": 100.0 * f1 / count}
