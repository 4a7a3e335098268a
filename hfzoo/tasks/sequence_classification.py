"""Sequence classification of single sentences (SST-2) and sentence pairs (RTE, MNLI).

Decoder: `bos a delim b eos`, classified from the last token (GPT). Encoder: `[CLS] a [SEP] b [SEP]` with token
types, classified from [CLS] (BERT). Encoder-decoder: text to text (T5): `"rte sentence1: ... sentence2: ..."` in,
the label's word out, read back from greedy generation; a generation that is no label word counts as wrong.
Metrics: accuracy, F1 (binary for two labels, the positive class being the second label in sorted order; macro
otherwise) and Matthews correlation.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import torch
from peft import TaskType
from torch import nn
from transformers import AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from ..metrics import load_metric
from .records import TABLE_SUFFIXES, DataError, Record, column, read_table, text
from .seq2seq import generate_texts
from .task import Task, gpt_input_ids, natural_sort_key


@dataclass
class ClassificationExample:
    text: str
    pair: str | None
    label: str
    where: str


class SequenceClassification(Task):
    name = "sequence-classification"
    suffixes = TABLE_SUFFIXES
    auto_classes = {
        "decoder": AutoModelForSequenceClassification,
        "encoder": AutoModelForSequenceClassification,
        "encoder_decoder": AutoModelForSeq2SeqLM,
    }
    peft_task_types = {
        "decoder": TaskType.SEQ_CLS,
        "encoder": TaskType.SEQ_CLS,
        "encoder_decoder": TaskType.SEQ_2_SEQ_LM,
    }

    def __init__(self, config):
        super().__init__(config)
        self.text_column = config.text_column or "text"
        self.pair_column = config.text_pair_column
        self.label_column = config.label_column or "label"
        self.labels: list[str] = []
        self.words: list[str] = []  # text-to-text targets, one per label

    @property
    def trains_head(self) -> bool:
        return self.family != "encoder_decoder"

    @property
    def pipeline_tag(self) -> str:
        return "text2text-generation" if self.family == "encoder_decoder" else "text-classification"

    # --- Data.
    def read(self, path: str) -> list[ClassificationExample]:
        return self.from_records(read_table(path))

    def from_records(self, records: list[Record]) -> list[ClassificationExample]:
        examples = []
        for where, fields in records:
            value = column(where, fields, self.label_column)
            if isinstance(value, (list, dict)):  # multi-label data, or a nested record: one label per row here
                raise DataError(f"{where}: {self.label_column!r} is {json.dumps(value)}, not one label (a string or a "
                                "number): sequence classification takes a single label per row")  # fmt: skip
            label = "" if value is None else str(value).strip()
            if not label:
                raise DataError(f"{where}: {self.label_column!r} is empty")
            pair = text(where, fields, self.pair_column) if self.pair_column else None
            examples.append(ClassificationExample(text(where, fields, self.text_column), pair, label, where))
        return examples

    def fit_labels(self, train: list[ClassificationExample], validation: list[ClassificationExample]) -> None:
        self.labels = sorted({e.label for e in train}, key=natural_sort_key)
        if len(self.labels) < 2:
            raise DataError(f"{train[0].where}: the training data has a single label ({self.labels[0]!r}); need two")
        for example in validation:
            if example.label not in self.labels:
                raise DataError(
                    f"{example.where}: label {example.label!r} does not occur in the training data "
                    f"(training labels: {', '.join(self.labels)})"
                )
        words = {str(k): str(v) for k, v in self.config.label_words.items()}
        if unknown := sorted(set(words) - set(self.labels)):
            raise ValueError(f"config key 'label_words' names labels not in the data: {', '.join(unknown)}")
        self.words = [words.get(label, label) for label in self.labels]
        if len(set(self.words)) != len(self.words):
            raise ValueError(f"config key 'label_words': two labels share a word ({self.words})")

    # --- Model.
    def model_kwargs(self, family: str) -> dict[str, Any]:
        if family == "encoder_decoder":
            return {}
        return {
            "num_labels": len(self.labels),
            "id2label": dict(enumerate(self.labels)),
            "label2id": {label: i for i, label in enumerate(self.labels)},
        }

    # --- Features.
    def source_text(self, example: ClassificationExample) -> str:
        """T5's input: `"<prefix> <column>: <text> <pair column>: <pair>"`, e.g. `"sst2 sentence: it 's great"`."""
        parts = [self.config.task_prefix or "", f"{self.text_column}: {example.text.strip()}"]
        if example.pair is not None:
            parts.append(f"{self.pair_column}: {example.pair.strip()}")
        return " ".join(p for p in parts if p)

    def encode(self, examples: list[ClassificationExample], training: bool) -> list[dict]:
        tokenizer, max_length = self.tokenizer, self.config.max_length
        features = []
        for example in examples:
            label = self.labels.index(example.label)
            texts = [example.text] if example.pair is None else [example.text, example.pair]
            if self.family == "decoder":
                ids, _ = gpt_input_ids(tokenizer, texts, max_length)
                feature = {"input_ids": ids, "attention_mask": [1] * len(ids), "labels": label}
            elif self.family == "encoder":
                feature = dict(tokenizer(*texts, truncation=True, max_length=max_length))
                feature["labels"] = label
            else:
                feature = dict(tokenizer(self.source_text(example), truncation=True, max_length=max_length))
                word = self.words[label]
                target = tokenizer(text_target=word, truncation=True, max_length=self.config.max_target_length)
                feature["labels"] = target["input_ids"]
            features.append(feature)
        return features

    # --- Predictions.
    def predict_batch(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> list:
        if self.family == "encoder_decoder":
            longest = max(len(self.tokenizer(text_target=w)["input_ids"]) for w in self.words)
            return generate_texts(model, batch, self.tokenizer, self.family, max_new_tokens=longest + 1, num_beams=1)
        inputs = {k: v for k, v in batch.items() if k != "labels"}
        return model(**inputs).logits.argmax(-1).tolist()

    def finish(
        self, examples: list[ClassificationExample], features: list[dict], outputs: list
    ) -> tuple[dict[str, float], list[dict]]:
        invalid = len(self.labels)  # a generated text that is no label word: its own (always wrong) class
        if self.family == "encoder_decoder":
            predicted = [self.words.index(t.strip()) if t.strip() in self.words else invalid for t in outputs]
        else:
            predicted = outputs
        references = [self.labels.index(e.label) for e in examples]
        metrics = classification_metrics(predicted, references, len(self.labels))
        records = []
        for example, prediction, output in zip(examples, predicted, outputs):
            record = {"where": example.where, "text": example.text}
            if example.pair is not None:
                record["text_pair"] = example.pair
            record.update(label=example.label, prediction=self.labels[prediction] if prediction < invalid else None)
            if self.family == "encoder_decoder":
                record["generated"] = output
            records.append(record)
        return metrics, records


def classification_metrics(predictions: list[int], references: list[int], num_labels: int) -> dict[str, float]:
    """Accuracy, F1 (binary with 2 labels, else macro) and Matthews correlation, through hfzoo's offline metrics."""
    average = "binary" if num_labels == 2 else "macro"
    return {
        "accuracy": load_metric("accuracy").compute(predictions=predictions, references=references)["accuracy"],
        "f1": load_metric("f1").compute(predictions=predictions, references=references, average=average)["f1"],
        "matthews_correlation": load_metric("matthews_correlation").compute(
            predictions=predictions, references=references
        )["matthews_correlation"],
    }
