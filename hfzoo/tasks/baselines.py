"""Floors a fine-tuned model must clear, computed from the data alone: a result below its task's floor has learned
nothing a lookup table or a word count does not know. Each takes the run's own training and validation examples."""

import math
import re
from collections import Counter, defaultdict

import torch

from ..metrics.seqeval import entities
from .question_answering import QAExample, squad_scores
from .token_classification import OUTSIDE, TaggedSentence, seqeval_scores

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
WORD = re.compile(r"\w+")


def unigram_perplexity(train_ids: torch.Tensor, validation_ids: torch.Tensor, vocab_size: int) -> float:
    """Perplexity of add-one-smoothed unigram frequencies: the floor any language model must beat
    (pretraining's counterpart of the fine-tuning floors below)."""
    counts = torch.bincount(train_ids.flatten(), minlength=vocab_size).double() + 1.0
    log_probs = (counts / counts.sum()).log()
    return math.exp(-log_probs[validation_ids.flatten()].mean().item())


def unigram_accuracy(train_ids: torch.Tensor, validation_ids: torch.Tensor, vocab_size: int) -> float:
    """Accuracy of always predicting the most frequent training target: the floor of a masked LM's token accuracy."""
    most_frequent = torch.bincount(train_ids.flatten(), minlength=vocab_size).argmax()
    return (validation_ids.flatten() == most_frequent).double().mean().item()


def majority_class_accuracy(train: list, validation: list) -> float | None:
    """Accuracy of always predicting the most frequent training label: the floor any classifier must clear (None
    for tasks without one label per example)."""
    if not all(isinstance(getattr(example, "label", None), str) for example in (*train, *validation)):
        return None
    majority = Counter(example.label for example in train).most_common(1)[0][0]
    return sum(example.label == majority for example in validation) / len(validation)


def memorized_entities(train: list[TaggedSentence], validation: list[TaggedSentence]) -> dict[str, float]:
    """CoNLL-2003's baseline (Tjong Kim Sang and De Meulder, 2003): the entity phrases that have a single type in the
    training data are tagged wherever they occur in a validation sentence, longest first; the task's scores."""
    types = defaultdict(set)
    for sentence in train:
        for kind, start, end in entities(sentence.tags):
            types[tuple(sentence.tokens[start:end])].add(kind)
    known = {words: kinds.pop() for words, kinds in types.items() if len(kinds) == 1}
    longest = max(map(len, known), default=0)
    predictions = []
    for sentence in validation:
        tokens, tags, i = sentence.tokens, [OUTSIDE] * len(sentence.tokens), 0
        while i < len(tokens):
            lengths = range(min(longest, len(tokens) - i), 0, -1)
            length = next((n for n in lengths if tuple(tokens[i : i + n]) in known), 0)
            if length:
                kind = known[tuple(tokens[i : i + length])]
                tags[i : i + length] = [f"B-{kind}"] + [f"I-{kind}"] * (length - 1)
            i += max(length, 1)
        predictions.append(tags)
    return seqeval_scores(predictions, [s.tags for s in validation])


def best_overlap_sentence(validation: list[QAExample]) -> dict[str, float]:
    """A reader that only retrieves: the context sentence sharing the most distinct words with the question is the
    answer (the first such sentence on a tie); SQuAD's exact match and F1."""
    predictions = []
    for example in validation:
        question = set(WORD.findall(example.question.lower()))
        sentences = SENTENCE_END.split(example.context)
        predictions.append(max(sentences, key=lambda s: len(question & set(WORD.findall(s.lower())))))
    return squad_scores(validation, predictions)
