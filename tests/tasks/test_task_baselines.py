"""The floors of the result cards (`hfzoo.tasks.baselines`): exact on small hand-made cases, and CoNLL-2003's
baseline on the real development set near the figure the shared task published for it."""

import math

import pytest
import torch

from hfzoo.tasks.baselines import (
    best_overlap_sentence, majority_class_accuracy, memorized_entities, unigram_accuracy, unigram_perplexity,
)
from hfzoo.tasks.question_answering import QAExample
from hfzoo.tasks.sequence_classification import ClassificationExample
from hfzoo.tasks.token_classification import TaggedSentence, read_conll


def sentence(words: str, tags: str) -> TaggedSentence:
    return TaggedSentence(words.split(), tags.split(), "test")


def test_memorized_entities_tags_unambiguous_phrases_longest_first():
    train = [
        sentence("New York is big", "B-LOC I-LOC O O"),
        sentence("York won", "B-ORG O"),
        sentence("Paris is in France", "B-LOC O O B-LOC"),
        sentence("Paris Hilton smiled", "B-PER I-PER O"),  # IOB2
        sentence("Jordan played", "B-PER O"),
        sentence("Jordan is a country", "B-LOC O O O"),  # two types: never tagged
    ]
    validation = [
        sentence("New York and York and Paris Hilton", "B-LOC I-LOC O B-ORG O B-PER I-PER"),
        sentence("Jordan visited France", "B-PER O B-LOC"),
    ]
    scores = memorized_entities(train, validation)
    # Found: New York (LOC), York (ORG), Paris Hilton (PER, longer than Paris), France (LOC); Jordan is missed.
    assert scores["precision"] == 1.0 and scores["recall"] == 4 / 5
    assert scores["f1"] == pytest.approx(2 * 0.8 / 1.8)
    assert scores["accuracy"] == 9 / 10


def test_memorized_entities_read_iob1_chunks():
    """CoNLL-2003's original files open an entity with I-, and use B- only between two entities of one type."""
    train = [sentence("the Red Cross helped", "O I-ORG I-ORG O")]
    scores = memorized_entities(train, [sentence("Red Cross", "B-ORG I-ORG")])
    assert scores["f1"] == 1.0


def test_conll_baseline_on_the_real_development_set(shared_data):
    """Tjong Kim Sang and De Meulder (2003) report this baseline at F1 71.18 on the English development set; the
    reconstruction here (exact phrase match, case-sensitive) lands within 3 points of it."""
    folder = shared_data / "conll2003"
    scores = memorized_entities(read_conll(str(folder / "train.txt")), read_conll(str(folder / "valid.txt")))
    print(f"CoNLL-2003 dev, memorized entities: {scores}")
    assert 0.6818 <= scores["f1"] <= 0.7418 and scores["precision"] > scores["recall"]


def qa(question: str, context: str, answer: str) -> QAExample:
    return QAExample("q", question, context, [{"text": answer, "answer_start": context.index(answer)}], "t", "test")


def test_best_overlap_sentence_answers_with_the_sentence_nearest_the_question():
    example = qa("Where did the treaty get signed?", "Talks began in 1990. The treaty was signed in Paris. It held.",
                 "Paris")  # fmt: skip
    scores = best_overlap_sentence([example])
    # The prediction "The treaty was signed in Paris." against "Paris": 1 shared token of 5 predicted (SQuAD drops articles).
    assert scores["exact_match"] == 0.0
    assert scores["f1"] == pytest.approx(100 * 2 * (1 / 5) * 1 / (1 / 5 + 1))


def test_majority_class_accuracy():
    train = [ClassificationExample(t, None, label, "test") for t, label in (("a", "pos"), ("b", "pos"), ("c", "neg"))]
    validation = [ClassificationExample("d", None, "neg", "test"), ClassificationExample("e", None, "pos", "test")]
    assert majority_class_accuracy(train, validation) == 0.5
    assert majority_class_accuracy([sentence("a", "O")], [sentence("b", "O")]) is None


def test_unigram_floors_of_a_masked_lm_by_hand():
    train, validation = torch.tensor([[1, 1, 1, 2], [3, 1, 2, 2]]), torch.tensor([1, 2, 0, 1])
    assert unigram_accuracy(train, validation, 5) == 0.5  # token 1 is the most frequent (4 of 8); 2 of 4 are 1
    # add-one counts 1, 5, 4, 2, 1 of 13: the mean negative log-probability of 1, 2, 0, 1
    expected = math.exp(-(2 * math.log(5 / 13) + math.log(4 / 13) + math.log(1 / 13)) / 4)
    assert unigram_perplexity(train, validation, 5) == pytest.approx(expected, rel=1e-12)
