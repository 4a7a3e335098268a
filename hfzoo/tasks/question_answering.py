"""Extractive question answering (SQuAD v1.1): predict the answer's start and end token in the context.

A context longer than `max_length` is split into overlapping windows (`doc_stride` tokens shared), each encoded
as `question + context window` (BERT's `[CLS] q [SEP] c [SEP]`). In training a window is labelled with the
answer's first and last token, or with the first token (BERT's "no answer here") when the answer is not wholly
inside it. In evaluation every window proposes its `n_best` starts and ends; spans inside the context, in order
and at most `max_answer_length` tokens long are scored by start + end logit, and the best over all windows of a
question is its answer, cut out of the context by the tokenizer's character offsets. Metrics: SQuAD exact match
and F1 against all reference answers.
"""

from __future__ import annotations

import json
from collections import defaultdict
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from peft import TaskType
from torch import nn
from transformers import AutoModelForQuestionAnswering, PreTrainedTokenizerBase

from ..metrics import load_metric
from .records import DataError, Record, column, text
from .task import Task


@dataclass
class QAExample:
    id: str
    question: str
    context: str
    answers: list[dict[str, Any]]  # {"text", "answer_start"}: a character offset into context
    title: str
    where: str


def checked_example(where: str, qa: dict, context: str, title: str) -> QAExample:
    """A SQuAD question whose every answer really is at its `answer_start` in the context."""
    question = text(where, qa, "question")
    answers = column(where, qa, "answers")
    if not answers:
        raise DataError(f"{where}: no answer (SQuAD v2 unanswerable questions are not supported)")
    for answer in answers:
        start, answer_text = column(where, answer, "answer_start"), column(where, answer, "text")
        found = context[start : start + len(answer_text)]
        if found != answer_text:
            raise DataError(
                f"{where}: answer {answer_text!r} is not in its context at answer_start={start} "
                f"(the context there reads {found!r})"
            )
    return QAExample(str(qa["id"]), question, context, answers, title, where)


def read_squad(path: str) -> list[QAExample]:
    """The questions of a SQuAD v1.1 json file (`{"data": [{"title", "paragraphs": [{"context", "qas"}]}]}`)."""
    try:
        with open(path, encoding="utf-8-sig") as f:
            data = json.load(f)
    except json.JSONDecodeError as e:
        raise DataError(f"{path}, line {e.lineno}: malformed JSON ({e.msg} at column {e.colno})") from None
    examples = []
    for a, article in enumerate(column(path, data, "data")):
        for p, paragraph in enumerate(column(f"{path}, article {a}", article, "paragraphs")):
            context = text(f"{path}, article {a}, paragraph {p}", paragraph, "context")
            for q, qa in enumerate(column(f"{path}, article {a}, paragraph {p}", paragraph, "qas")):
                qid = column(f"{path}, article {a}, paragraph {p}, question {q}", qa, "id")
                examples.append(checked_example(f"{path}, question id {qid}", qa, context, article.get("title", a)))
    return examples


class QuestionAnswering(Task):
    name = "question-answering"
    pipeline_tag = "question-answering"
    suffixes = (".json",)
    auto_classes = {family: AutoModelForQuestionAnswering for family in ("encoder", "decoder", "encoder_decoder")}
    peft_task_types = {family: TaskType.QUESTION_ANS for family in auto_classes}

    # --- Data.
    def read(self, path: str) -> list[QAExample]:
        return read_squad(path)

    def from_records(self, records: list[Record]) -> list[QAExample]:
        """Hub rows in the `squad` dataset's layout: answers as `{"text": [...], "answer_start": [...]}`."""
        examples = []
        for where, row in records:
            answers = column(where, row, "answers")
            answers = [{"text": t, "answer_start": s} for t, s in zip(answers["text"], answers["answer_start"])]
            qa = {**row, "answers": answers}
            context = text(where, row, "context")
            examples.append(checked_example(f"{where} (id {row.get('id')})", qa, context, row.get("title")))
        return examples

    def group(self, example: QAExample) -> Any:
        return example.title  # hold out whole articles: questions on one paragraph share their answers' context

    def bind(self, tokenizer: PreTrainedTokenizerBase, family: str) -> None:
        if not tokenizer.is_fast:
            raise ValueError("question-answering maps tokens to context characters with a fast tokenizer's offsets")
        super().bind(tokenizer, family)

    # --- Features.
    def encode(self, examples: list[QAExample], training: bool) -> list[dict]:
        encodings = self.tokenizer(
            [e.question.lstrip() for e in examples],  # SQuAD has questions with leading spaces that waste room
            [e.context for e in examples],
            truncation="only_second",
            max_length=self.config.max_length,
            stride=self.config.doc_stride,
            return_overflowing_tokens=True,
            return_offsets_mapping=True,
        )
        features = []
        for i, example_index in enumerate(encodings["overflow_to_sample_mapping"]):
            sequence_ids = encodings.sequence_ids(i)
            offsets = encodings["offset_mapping"][i]
            feature = {k: encodings[k][i] for k in ("input_ids", "attention_mask", "token_type_ids") if k in encodings}
            if training:
                start, end = self.answer_tokens(examples[example_index], offsets, sequence_ids)
                feature.update(start_positions=start, end_positions=end)
            else:
                feature["example_index"] = example_index
                feature["offsets"] = [tuple(o) if s == 1 else None for o, s in zip(offsets, sequence_ids)]
            features.append(feature)
        return features

    @staticmethod
    def answer_tokens(example: QAExample, offsets: list, sequence_ids: list) -> tuple[int, int]:
        """The first and last token of the (first) answer in this window, or (0, 0) when it is not inside it."""
        answer = example.answers[0]
        start_char = answer["answer_start"]
        end_char = start_char + len(answer["text"])
        context = [i for i, s in enumerate(sequence_ids) if s == 1]
        if not context or offsets[context[0]][0] > start_char or offsets[context[-1]][1] < end_char:
            return 0, 0
        start = next(i for i in context if offsets[i][1] > start_char)
        end = next(i for i in reversed(context) if offsets[i][0] < end_char)
        return start, end

    # --- Predictions.
    def predict_batch(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> list:
        outputs = model(**batch)
        start, end = outputs.start_logits.float().cpu().numpy(), outputs.end_logits.float().cpu().numpy()
        return list(zip(start, end))

    def best_answer(self, example: QAExample, windows: list[tuple[dict, Any]]) -> str:
        """The highest-scoring valid span over all windows of one question ("" if no window has one)."""
        best_score, best_text = -np.inf, ""
        for feature, (start_logits, end_logits) in windows:
            offsets = feature["offsets"]
            starts = np.argsort(start_logits[: len(offsets)])[::-1][: self.config.n_best]
            ends = np.argsort(end_logits[: len(offsets)])[::-1][: self.config.n_best]
            for s in starts:
                for e in ends:
                    if offsets[s] is None or offsets[e] is None or e < s or e - s + 1 > self.config.max_answer_length:
                        continue
                    score = start_logits[s] + end_logits[e]
                    if score > best_score:
                        best_score, best_text = score, example.context[offsets[s][0] : offsets[e][1]]
        return best_text

    def finish(self, examples: list[QAExample], features: list[dict], outputs: list) -> tuple[dict, list[dict]]:
        windows = defaultdict(list)
        for feature, output in zip(features, outputs):
            windows[feature["example_index"]].append((feature, output))
        predictions = [self.best_answer(example, windows[i]) for i, example in enumerate(examples)]
        scores = squad_scores(examples, predictions)
        records = [
            {"id": e.id, "question": e.question, "prediction_text": p, "answers": [a["text"] for a in e.answers]}
            for e, p in zip(examples, predictions)
        ]
        return {"exact_match": scores["exact_match"], "f1": scores["f1"]}, records


def squad_scores(examples: list[QAExample], predictions: list[str]) -> dict[str, float]:
    """SQuAD's exact match and F1 (in percent) of one answer text per example, against all its reference answers."""
    return load_metric("squad").compute(
        predictions=[{"id": e.id, "prediction_text": p} for e, p in zip(examples, predictions)],
        references=[
            {"id": e.id, "answers": {"text": [a["text"] for a in e.answers],
                                     "answer_start": [a["answer_start"] for a in e.answers]}}
            for e in examples
        ],
    )  # fmt: skip
