"""Sequence to sequence (translation, summarisation): a source column in, a target column out, BLEU by sacreBLEU.

Encoder-decoder: the source (after an optional `task_prefix` such as "translate English to German:", as T5) feeds
the encoder and the target is the decoder's label sequence. Decoder: one sequence `bos source delim target eos`
with the loss on `target eos` only; evaluation generates from the prompt `bos source delim`. Evaluation decodes
greedily (or with `num_beams`) up to `max_target_length` new tokens.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from peft import TaskType
from torch import nn
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, PreTrainedTokenizerBase

from ..metrics import load_metric
from .records import TABLE_SUFFIXES, Record, read_parallel, read_table, text
from .task import Task, gpt_input_ids, pad_features


@dataclass
class TextPair:
    source: str
    target: str
    where: str


def generate_texts(
    model: nn.Module,
    batch: dict[str, torch.Tensor],
    tokenizer: PreTrainedTokenizerBase,
    family: str,
    max_new_tokens: int,
    num_beams: int,
) -> list[str]:
    """Decoded generations for a batch of (left-padded, for decoders) prompts, without the prompts."""
    model = getattr(model, "module", model)  # DDP wraps the model; generate lives on the model itself
    prompts = batch["input_ids"]
    generated = model.generate(
        input_ids=prompts,
        attention_mask=batch["attention_mask"],
        max_new_tokens=max_new_tokens,
        num_beams=num_beams,
        do_sample=False,
        pad_token_id=tokenizer.pad_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    if family == "decoder":  # a decoder returns prompt + continuation
        generated = generated[:, prompts.shape[1] :]
    return [t.strip() for t in tokenizer.batch_decode(generated, skip_special_tokens=True)]


class Seq2Seq(Task):
    name = "seq2seq"
    auto_classes = {"encoder_decoder": AutoModelForSeq2SeqLM, "decoder": AutoModelForCausalLM}
    peft_task_types = {"encoder_decoder": TaskType.SEQ_2_SEQ_LM, "decoder": TaskType.CAUSAL_LM}
    trains_head = False  # the language-model head is pretrained

    def __init__(self, config):
        super().__init__(config)
        self.source_column = config.text_column or "source"
        self.target_column = config.target_column or "target"
        self.suffixes = (*TABLE_SUFFIXES, f".{self.source_column}")  # parallel text: train.en beside train.de

    @property
    def pipeline_tag(self) -> str:
        return "text-generation" if self.family == "decoder" else "text2text-generation"

    def read(self, path: str) -> list[TextPair]:
        if Path(path).suffix == f".{self.source_column}":
            return self.from_records(read_parallel(path, self.source_column, self.target_column))
        return self.from_records(read_table(path))

    def from_records(self, records: list[Record]) -> list[TextPair]:
        return [
            TextPair(text(where, fields, self.source_column), text(where, fields, self.target_column), where)
            for where, fields in records
        ]

    def source_text(self, example: TextPair) -> str:
        return f"{self.config.task_prefix} {example.source}" if self.config.task_prefix else example.source

    def training_texts(self, examples: list[TextPair]) -> Iterator[str]:
        """Source and target sentences alike: one joint vocabulary for both languages, so the Transformer's shared
        embeddings (and tied softmax) mean the same piece on both sides (Vaswani et al., 2017, section 5.1)."""
        for example in examples:
            yield self.source_text(example)
            yield example.target

    def encode(self, examples: list[TextPair], training: bool) -> list[dict]:
        tokenizer, config = self.tokenizer, self.config
        features = []
        for example in examples:
            if self.family == "decoder":
                # `bos source delim`: an empty second text puts the delimiter after the source and nothing else.
                ids, _ = gpt_input_ids(tokenizer, [self.source_text(example), ""], config.max_length, end=False)
                feature = {"input_ids": ids}
                if training:
                    target = tokenizer(example.target, add_special_tokens=False)["input_ids"]
                    target = target[: config.max_target_length - 1] + [tokenizer.eos_token_id]
                    feature = {"input_ids": ids + target, "labels": [-100] * len(ids) + target}
                feature["attention_mask"] = [1] * len(feature["input_ids"])
            else:
                feature = dict(tokenizer(self.source_text(example), truncation=True, max_length=config.max_length))
                if training:
                    target = tokenizer(text_target=example.target, truncation=True, max_length=config.max_target_length)
                    feature["labels"] = target["input_ids"]
            features.append(feature)
        return features

    def collate(self, features: Sequence[dict]) -> dict[str, torch.Tensor]:
        # Decoder prompts are left-padded, so every row's continuation starts at the same position.
        prompts = self.family == "decoder" and "labels" not in features[0]
        return pad_features(features, self.tokenizer.pad_token_id, side="left" if prompts else "right")

    def predict_batch(self, model: nn.Module, batch: dict[str, torch.Tensor]) -> list[str]:
        config = self.config
        return generate_texts(model, batch, self.tokenizer, self.family, config.max_target_length, config.num_beams)

    def finish(self, examples: list[TextPair], features: list[dict], outputs: list[str]) -> tuple[dict, list[dict]]:
        bleu = load_metric("sacrebleu").compute(predictions=outputs, references=[[e.target] for e in examples])
        records = [
            {"where": e.where, "source": e.source, "target": e.target, "prediction": output}
            for e, output in zip(examples, outputs)
        ]
        return {"bleu": bleu["score"]}, records
