"""hfzoo's local evaluate modules: they load by path with the network off and give the textbook numbers."""

import math

import pytest

from hfzoo.metrics import LOCAL_METRICS, load_metric


@pytest.fixture(autouse=True)
def offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_EVALUATE_OFFLINE", "1")


def test_all_shipped_metrics_load_offline():
    assert set(LOCAL_METRICS) >= {"accuracy", "f1", "matthews_correlation", "seqeval", "squad", "sacrebleu"}
    for name in LOCAL_METRICS:
        load_metric(name)


def test_accuracy_with_add_batch():
    metric = load_metric("accuracy")
    metric.add_batch(predictions=[0, 1, 1], references=[0, 1, 0])
    metric.add_batch(predictions=[2], references=[2])
    assert metric.compute() == {"accuracy": 0.75}


def test_f1_binary_macro_micro():
    predictions, references = [1, 1, 0, 0, 2, 1], [1, 0, 0, 1, 2, 1]
    f1 = load_metric("f1")
    # label 1: tp 2, fp 1, fn 1 -> 2/3; label 0: tp 1, fp 1, fn 1 -> 1/2; label 2: 1.
    assert f1.compute(predictions=predictions, references=references, average="binary")["f1"] == pytest.approx(2 / 3)
    macro = f1.compute(predictions=predictions, references=references, average="macro")["f1"]
    assert macro == pytest.approx((2 / 3 + 1 / 2 + 1) / 3)
    micro = f1.compute(predictions=predictions, references=references, average="micro")["f1"]
    assert micro == pytest.approx(4 / 6)  # micro F1 == accuracy for single-label classification
    with pytest.raises(ValueError, match="average='weighted'"):
        f1.compute(predictions=predictions, references=references, average="weighted")


def test_matthews_binary_matches_formula_and_bounds():
    predictions, references = [1, 1, 0, 0, 1, 0, 1, 1], [1, 0, 0, 1, 1, 0, 1, 0]
    tp, tn, fp, fn = 3, 2, 2, 1
    expected = (tp * tn - fp * fn) / math.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
    mcc = load_metric("matthews_correlation")
    assert mcc.compute(predictions=predictions, references=references)["matthews_correlation"] == pytest.approx(expected)
    assert mcc.compute(predictions=references, references=references)["matthews_correlation"] == pytest.approx(1.0)
    inverted = [1 - r for r in references]
    assert mcc.compute(predictions=inverted, references=references)["matthews_correlation"] == pytest.approx(-1.0)
    assert mcc.compute(predictions=[1] * 8, references=references)["matthews_correlation"] == 0.0


def test_seqeval_entity_level():
    references = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG", "I-ORG", "I-ORG", "O"]]
    predictions = [["B-PER", "I-PER", "O", "B-ORG"], ["B-ORG", "I-ORG", "O", "O"]]
    result = load_metric("seqeval").compute(predictions=predictions, references=references)
    # Gold: PER(0,2), LOC(3,4), ORG(0,3). Predicted: PER(0,2) correct, ORG(3,4) wrong type, ORG(0,2) wrong end.
    assert result["overall_precision"] == pytest.approx(1 / 3)
    assert result["overall_recall"] == pytest.approx(1 / 3)
    assert result["overall_f1"] == pytest.approx(1 / 3)
    assert result["overall_accuracy"] == pytest.approx(6 / 8)


def test_seqeval_stray_inside_tag_starts_entity_and_length_mismatch_is_an_error():
    metric = load_metric("seqeval")
    result = metric.compute(predictions=[["O", "I-MISC", "I-MISC"]], references=[["O", "B-MISC", "I-MISC"]])
    assert result["overall_f1"] == 1.0
    with pytest.raises(ValueError, match="2 tags but its reference has 3"):
        metric.compute(predictions=[["O", "O"]], references=[["O", "O", "O"]])


def test_squad_normalisation_and_best_reference():
    references = [
        {"id": "q1", "answers": {"text": ["the Denver Broncos", "Broncos"], "answer_start": [0, 4]}},
        {"id": "q2", "answers": {"text": ["Santa Clara, California"], "answer_start": [0]}},
    ]
    predictions = [{"id": "q1", "prediction_text": "Denver Broncos!"}, {"id": "q2", "prediction_text": "Santa Clara"}]
    result = load_metric("squad").compute(predictions=predictions, references=references)
    assert result["exact_match"] == pytest.approx(50.0)
    # q2: 2 common tokens, precision 1, recall 2/3 -> F1 0.8.
    assert result["f1"] == pytest.approx(100 * (1.0 + 0.8) / 2)


def test_sacrebleu_matches_the_package():
    import sacrebleu

    predictions = ["a dog runs in the park", "two men are playing football outside"]
    references = [["a dog is running in the park"], ["two men play soccer outside"]]
    result = load_metric("sacrebleu").compute(predictions=predictions, references=references)
    expected = sacrebleu.corpus_bleu(predictions, [[r[0] for r in references]]).score
    assert result["score"] == pytest.approx(expected)
    assert 0 < result["score"] < 100
