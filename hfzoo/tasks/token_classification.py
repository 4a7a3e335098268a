"""Token classification (NER, POS): one tag per word, predicted from the word's first sub-token (BERT, section 5.3).

Data: CoNLL text (`TOKEN POS CHUNK NER` per line, the first field the word and the last the tag, blank lines
between sentences, `-DOCSTART-` lines skipped; every line of a file must have as many fields as its first) or
jsonl / Hub rows with a list of words (`text_column`, default `tokens`) and a list of tags (`label_column`, default
`ner_tags`). Words are tokenised separately (`is_split_into_words`); the first sub-token of each carries the word's
tag and the others -100, so the loss and the predictions count each word once. Metrics: seqeval's entity-level
precision, recall and F1 (and token accuracy).
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from peft import TaskType
from torch import nn
from transformers import AutoModelForTokenClassification, PreTrainedTokenizerBase

from ..data.text_files import decoded_lines
from ..metrics import load_metric
from .records import DataError, Record, column, read_table
from .task import Task, natural_sort_key

logger = logging.getLogger(__name__)
OUTSIDE = "O"


@dataclass
class TaggedSentence:
    tokens: list[str]
    tags: list[str]
    source: str  # the file (or Hub row) it came from
    first_line: int | None = None  # CoNLL: the line of its first token; token i is on line first_line + i

    @property
    def where(self) -> str:
        return self.source if self.first_line is None else f"{self.source}, line {self.first_line}"

    def token_where(self, i: int) -> str:
        return self.source if self.first_line is None else f"{self.source}, line {self.first_line + i}"


def read_conll(path: str) -> list[TaggedSentence]:
    """The sentences of a CoNLL file; a line whose field count differs from the file's first line is an error."""
    sentences, tokens, tags, first, width = [], [], [], None, None

    def flush() -> None:
        nonlocal tokens, tags
        if tokens:
            sentences.append(TaggedSentence(tokens, tags, path, first))
        tokens, tags = [], []

    for lineno, line in decoded_lines(path):
        fields = line.split()
        if not fields or fields[0] == "-DOCSTART-":
            flush()
            continue
        if width is None:
            if len(fields) < 2:
                raise DataError(f"{path}, line {lineno}: 1 field; CoNLL lines are 'TOKEN ... TAG' (at least 2)")
            width = len(fields)
        if len(fields) != width:
            raise DataError(
                f"{path}, line {lineno}: {len(fields)} fields, but the file's lines have {width} "
                "(TOKEN ... TAG, e.g. TOKEN POS CHUNK NER)"
            )
        if not tokens:
            first = lineno
        tokens.append(fields[0])
        tags.append(fields[-1])
    flush()
    if not sentences:
        raise DataError(f"{path}: no sentences (expected CoNLL lines 'TOKEN ... TAG')")
    return sentences


def first_subtoken_labels(word_ids: list[int | None], word_labels: list[int]) -> list[int]:
    """Each word's label on its first sub-token; -100 on its other sub-tokens and on special tokens."""
    labels, previous = [], None
    for word in word_ids:
        labels.append(-100 if word is None or word == previous else word_labels[word])
        previous = word
    return labels


class TokenClassification(Task):
    name = "token-classification"
    pipeline_tag = "token-classification"
    suffixes = (".txt", ".conll", ".jsonl")
    # An encoder-decoder tags from its encoder alone (T5ForTokenClassification); a decoder tags causally.
    auto_classes = {family: AutoModelForTokenClassification for family in ("encoder", "decoder", "encoder_decoder")}
    peft_task_types = {family: TaskType.TOKEN_CLS for family in auto_classes}

    def __init__(self, config):
        super().__init__(config)
        self.tokens_column = config.text_column or "tokens"
        self.tags_column = config.label_column or "ner_tags"
        self.labels: list[str] = []

    # --- Data.
    def read(self, path: str) -> list[TaggedSentence]:
        return self.from_records(read_table(path)) if Path(path).suffix == ".jsonl" else read_conll(path)

    def from_records(self, records: list[Record]) -> list[TaggedSentence]:
        sentences = []
        for where, fields in records:
            tokens, tags = column(where, fields, self.tokens_column), column(where, fields, self.tags_column)
            if not (isinstance(tokens, list) and tokens and all(isinstance(t, str) and t for t in tokens)):
                raise DataError(f"{where}: {self.tokens_column!r} must be a non-empty list of non-empty words")
            if not (isinstance(tags, list) and len(tags) == len(tokens)):
                raise DataError(f"{where}: {self.tags_column!r} must be a list of one tag per word ({len(tokens)})")
            sentences.append(TaggedSentence(tokens, [str(t) for t in tags], where))
        return sentences

    def fit_labels(self, train: list[TaggedSentence], validation: list[TaggedSentence]) -> None:
        self.labels = sorted({tag for s in train for tag in s.tags}, key=natural_sort_key)
        for sentence in validation:
            for i, tag in enumerate(sentence.tags):
                if tag not in self.labels:
                    raise DataError(
                        f"{sentence.token_where(i)}: tag {tag!r} (word {sentence.tokens[i]!r}) does not occur in the "
                        f"training data (training tags: {', '.join(self.labels)})"
                    )

    # --- Model.
    def model_kwargs(self, family: str) -> dict[str, Any]:
        return {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": {label: i for i, label in enumerate(self.labels)},
        }

    def bind(self, tokenizer: PreTrainedTokenizerBase, family: str) -> None:
        if not tokenizer.is_fast:
            raise ValueError("token-classification maps sub-tokens to words with a fast tokenizer's word_ids()")
        super().bind(tokenizer, family)

    # --- Features and predictions.
    def encode(self, examples: list[TaggedSentence], training: bool) -> list[dict]:
        features = []
        for sentence in examples:
            encoding = self.tokenizer(
                sentence.tokens, is_split_into_words=True, truncation=True, max_length=self.config.max_length
            )
            word_ids = encoding.word_ids()
            feature = dict(encoding)
            feature["labels"] = first_subtoken_labels(word_ids, [self.labels.index(t) for t in sentence.tags])
            feature["word_ids"] = word_ids
            features.append(feature)
        return features

    def predict_batch(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> list[list[int]]:
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        return model(**inputs).logits.argmax(-1).tolist()

    def finish(
        self, examples: list[TaggedSentence], features: list[dict], outputs: list[list[int]]
    ) -> tuple[dict[str, float], list[dict]]:
        fallback = OUTSIDE if OUTSIDE in self.labels else self.labels[0]
        predictions, records, truncated = [], [], 0
        for sentence, feature, token_predictions in zip(examples, features, outputs):
            words = [fallback] * len(sentence.tokens)  # words cut off by max_length get no entity
            seen = set()
            for position, word in enumerate(feature["word_ids"]):
                if word is not None and word not in seen:
                    seen.add(word)
                    words[word] = self.labels[token_predictions[position]]
            truncated += len(sentence.tokens) - len(seen)
            predictions.append(words)
            records.append({"where": sentence.where, "tokens": sentence.tokens, "labels": sentence.tags,
                            "predictions": words})  # fmt: skip
        if truncated:
            logger.warning("%d validation words were cut off by max_length=%d and predicted %r",
                           truncated, self.config.max_length, fallback)  # fmt: skip
        return seqeval_scores(predictions, [s.tags for s in examples]), records


def seqeval_scores(predictions: list[list[str]], references: list[list[str]]) -> dict[str, float]:
    """Entity-level precision, recall and F1, and token accuracy, of tag sequences (CoNLL-2003's evaluation)."""
    scores = load_metric("seqeval").compute(predictions=predictions, references=references)
    return {name: scores[f"overall_{name}"] for name in ("precision", "recall", "f1", "accuracy")}
