"""Encoder models in transformers' own tools: the fill-mask, text-classification and token-classification pipelines,
extractive question answering, and `Trainer` with BERT's masking collator, with a WordPiece tokenizer trained here."""

import pytest
import torch
from datasets import Dataset
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    DataCollatorForLanguageModeling,
    PreTrainedTokenizerFast,
    Trainer,
    TrainingArguments,
    pipeline,
)

ENCODER_PRESETS = ("bert-tiny", "roberta-tiny", "modernbert-tiny", "deberta-tiny")
SPECIAL_TOKENS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
CONTEXT = "The json module encodes Python objects as JSON text and decodes JSON documents back into objects."


@pytest.fixture(scope="session")
def wordpiece_tokenizer(docstring_texts: list[str]) -> PreTrainedTokenizerFast:
    """BERT-style WordPiece (lower-cased, vocab 1500) with [CLS] A [SEP] (B [SEP]) templates and segment ids."""
    wordpiece = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    wordpiece.normalizer = normalizers.BertNormalizer(lowercase=True)
    wordpiece.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    wordpiece.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=1500, special_tokens=SPECIAL_TOKENS, show_progress=False)
    wordpiece.train_from_iterator(docstring_texts[:400], trainer)
    cls_id, sep_id = wordpiece.token_to_id("[CLS]"), wordpiece.token_to_id("[SEP]")
    wordpiece.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]",
        pair="[CLS] $A [SEP] $B:1 [SEP]:1",
        special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)],
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=wordpiece,
        pad_token="[PAD]",
        unk_token="[UNK]",
        cls_token="[CLS]",
        sep_token="[SEP]",
        mask_token="[MASK]",
        padding_side="right",
        model_max_length=512,
        # v5's default is input_ids + attention_mask; BERT's tokenizers also return the segment ids.
        model_input_names=["input_ids", "token_type_ids", "attention_mask"],
    )


@pytest.fixture
def encoder_for(tiny_model, wordpiece_tokenizer):
    """Factory `encoder_for(preset, auto_class, **overrides)`: a tiny model sized to the WordPiece vocabulary."""

    def build(preset: str, auto_class, **overrides):
        return tiny_model(
            preset, auto_class, vocab_size=len(wordpiece_tokenizer), pad_token_id=wordpiece_tokenizer.pad_token_id,
            **overrides,
        )

    return build


def test_the_tokenizer_adds_bert_special_tokens_and_segments(wordpiece_tokenizer):
    encoded = wordpiece_tokenizer("what does it decode?", "json documents")
    tokens = wordpiece_tokenizer.convert_ids_to_tokens(encoded["input_ids"])
    assert tokens[0] == "[CLS]" and tokens.count("[SEP]") == 2 and tokens[-1] == "[SEP]"
    assert set(encoded["token_type_ids"]) == {0, 1}


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_fill_mask_pipeline(preset, encoder_for, wordpiece_tokenizer):
    fill = pipeline("fill-mask", model=encoder_for(preset, AutoModelForMaskedLM), tokenizer=wordpiece_tokenizer)
    predictions = fill("the json module [MASK] python objects.", top_k=4)
    assert len(predictions) == 4
    scores = [prediction["score"] for prediction in predictions]
    assert scores == sorted(scores, reverse=True) and 0 < sum(scores) <= 1 + 1e-6
    for prediction in predictions:
        token = wordpiece_tokenizer.convert_ids_to_tokens(prediction["token"])
        assert token == prediction["token_str"].replace(" ", "")
        assert "[MASK]" not in prediction["sequence"]


def test_text_classification_pipeline(encoder_for, wordpiece_tokenizer):
    labels = {0: "negative", 1: "positive"}
    model = encoder_for("bert-tiny", AutoModelForSequenceClassification, num_labels=2, id2label=labels)
    classify = pipeline("text-classification", model=model, tokenizer=wordpiece_tokenizer)
    results = classify(["decodes json documents", "a longer sentence about python objects and text"], top_k=None)
    assert len(results) == 2
    for scores in results:
        assert {score["label"] for score in scores} == set(labels.values())
        assert abs(sum(score["score"] for score in scores) - 1) < 1e-5


def test_token_classification_pipeline(encoder_for, wordpiece_tokenizer):
    # No "O" label: the pipeline drops O-tagged tokens, and every token should come back here.
    labels = {0: "B-MOD", 1: "I-MOD", 2: "B-TYPE"}
    model = encoder_for("roberta-tiny", AutoModelForTokenClassification, num_labels=3, id2label=labels)
    tag = pipeline("token-classification", model=model, tokenizer=wordpiece_tokenizer)
    text = "The json module decodes documents"
    entities = tag(text)
    words = wordpiece_tokenizer(text, add_special_tokens=False)["input_ids"]
    assert len(entities) == len(words)
    for entity in entities:
        assert entity["entity"] in labels.values() and 0 <= entity["score"] <= 1
        assert text[entity["start"] : entity["end"]].lower() == entity["word"].removeprefix("##")


def extract_answer(model, tokenizer, question: str, context: str, max_answer_tokens: int = 15) -> dict:
    """What transformers' removed question-answering pipeline did: the best-scoring context span, mapped to text."""
    encoded = tokenizer(question, context, truncation="only_second", return_offsets_mapping=True, return_tensors="pt")
    offsets = encoded.pop("offset_mapping")[0]
    in_context = torch.tensor([segment == 1 for segment in encoded.sequence_ids(0)])
    with torch.no_grad():
        output = model(**encoded)
    scores = output.start_logits[0][:, None] + output.end_logits[0][None, :]
    span_length = torch.arange(len(in_context))[None, :] - torch.arange(len(in_context))[:, None]
    valid = in_context[:, None] & in_context[None, :] & (span_length >= 0) & (span_length < max_answer_tokens)
    start, end = divmod(int(scores.masked_fill(~valid, float("-inf")).argmax()), len(in_context))
    char_start, char_end = int(offsets[start][0]), int(offsets[end][1])
    return {"start": char_start, "end": char_end, "answer": context[char_start:char_end]}


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_extractive_question_answering_end_to_end(preset, encoder_for, wordpiece_tokenizer):
    # transformers 5.23 removed the "question-answering" pipeline (KeyError pointing to chat models), so this runs
    # the same steps by hand: (question, context) pair with segment ids and offsets, start/end logits, best span.
    with pytest.raises(KeyError, match="question-answering has been removed"):
        pipeline("question-answering")
    model = encoder_for(preset, AutoModelForQuestionAnswering)
    result = extract_answer(model, wordpiece_tokenizer, "What does the json module decode?", CONTEXT)
    assert 0 <= result["start"] < result["end"] <= len(CONTEXT)
    assert result["answer"] == CONTEXT[result["start"] : result["end"]] and result["answer"].strip()


def test_trainer_runs_masked_lm_steps(encoder_for, wordpiece_tokenizer, docstring_texts, tmp_path):
    model = encoder_for("bert-tiny", AutoModelForMaskedLM)
    encoded = wordpiece_tokenizer(docstring_texts[:48], truncation=True, max_length=64)
    dataset = Dataset.from_dict(dict(encoded))
    collator = DataCollatorForLanguageModeling(wordpiece_tokenizer, mlm_probability=0.15, seed=0)
    arguments = TrainingArguments(
        output_dir=str(tmp_path), max_steps=3, per_device_train_batch_size=8, learning_rate=1e-3, logging_steps=1,
        use_cpu=True, report_to=[], save_strategy="no", dataloader_num_workers=0,
    )
    trainer = Trainer(
        model=model, args=arguments, train_dataset=dataset, data_collator=collator, processing_class=wordpiece_tokenizer
    )
    before = model.model.embed_tokens.weight.detach().clone()
    result = trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert result.global_step == 3 and len(losses) == 3
    assert all(torch.isfinite(torch.tensor(losses)))
    assert not torch.equal(before, model.model.embed_tokens.weight)
