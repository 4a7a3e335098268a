"""The encoder-decoder family in the transformers ecosystem: a locally trained T5-layout tokenizer, the
Seq2SeqTrainer with generation, text in / text out, the text-classification pipeline, and a task only
cross-attention can learn."""

import pytest
import torch
from tests.helpers.seq2seq_generation import EOS, PAD, greedy, seq2seq
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers
from transformers import (
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    DataCollatorForSeq2Seq,
    PreTrainedTokenizerFast,
    Seq2SeqTrainer,
    Seq2SeqTrainingArguments,
    pipeline,
)

import hfzoo

SENTINELS = [f"<extra_id_{i}>" for i in range(4)]


@pytest.fixture(scope="module")
def seq2seq_tokenizer(docstring_texts) -> PreTrainedTokenizerFast:
    """A T5-layout Unigram tokenizer trained here: <pad> 0, </s> 1, <unk> 2, sentinels; appends </s>; right padding."""
    unigram = Tokenizer(models.Unigram())
    unigram.pre_tokenizer = pre_tokenizers.Metaspace()
    unigram.decoder = decoders.Metaspace()
    specials = ["<pad>", "</s>", "<unk>", *SENTINELS]
    trainer = trainers.UnigramTrainer(vocab_size=800, special_tokens=specials, unk_token="<unk>", show_progress=False)
    unigram.train_from_iterator(docstring_texts[:400], trainer)
    unigram.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", EOS)])
    return PreTrainedTokenizerFast(
        tokenizer_object=unigram,
        pad_token="<pad>",
        eos_token="</s>",
        unk_token="<unk>",
        additional_special_tokens=SENTINELS,
        padding_side="right",
    )


def test_trained_tokenizer_has_the_t5_layout(seq2seq_tokenizer):
    assert (seq2seq_tokenizer.pad_token_id, seq2seq_tokenizer.eos_token_id, seq2seq_tokenizer.unk_token_id) == (0, 1, 2)
    ids = seq2seq_tokenizer("Return a new dictionary.").input_ids
    assert ids[-1] == EOS and seq2seq_tokenizer.decode(ids, skip_special_tokens=True) == "Return a new dictionary."


def docstring_pairs(texts: list[str], count: int) -> list[dict[str, str]]:
    """(first sentence -> second sentence) pairs: a small real text-to-text task."""
    pairs = []
    for text in texts:
        sentences = [s.strip() for s in text.replace("\n", " ").split(". ") if len(s.strip()) > 10]
        if len(sentences) >= 2:
            pairs.append({"source": sentences[0][:200], "target": sentences[1][:200]})
    return pairs[:count]


def test_seq2seq_trainer_trains_three_steps_and_predicts_with_generate(
    seq2seq_tokenizer, docstring_texts, tiny_model, tmp_path
):
    from datasets import Dataset

    tokenizer = seq2seq_tokenizer
    model = seq2seq(tiny_model, "t5-tiny", vocab_size=len(tokenizer))

    def tokenize(pair):
        features = tokenizer(pair["source"], truncation=True, max_length=48)
        features["labels"] = tokenizer(pair["target"], truncation=True, max_length=24)["input_ids"]
        return features

    data = Dataset.from_list(docstring_pairs(docstring_texts, 16)).map(tokenize, remove_columns=["source", "target"])
    args = Seq2SeqTrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        per_device_eval_batch_size=8,
        learning_rate=1e-3,
        predict_with_generate=True,
        generation_max_length=6,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
    )
    trainer = Seq2SeqTrainer(
        model=model,
        args=args,
        train_dataset=data,
        eval_dataset=data.select(range(8)),
        data_collator=DataCollatorForSeq2Seq(tokenizer, model=model),
        processing_class=tokenizer,
    )
    trainer.train()
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert trainer.state.global_step == 3 and len(losses) == 3 and all(loss > 0 for loss in losses)
    predictions = trainer.predict(data.select(range(8))).predictions
    # generate stopped at generation_max_length; the trainer pads to the generation config's max_length.
    assert (predictions[:, 6:] <= PAD).all()
    texts = tokenizer.batch_decode(predictions.clip(min=PAD), skip_special_tokens=True)
    assert len(texts) == 8 and all(isinstance(text, str) for text in texts)


def test_text_in_text_out_with_the_trained_tokenizer(seq2seq_tokenizer, tiny_model):
    """transformers 5 removed the text2text-generation pipeline (REMOVED_TASKS); this is the flow it wrapped."""
    tokenizer = seq2seq_tokenizer
    model = seq2seq(tiny_model, "bart-tiny", vocab_size=len(tokenizer))
    batch = tokenizer(["Return the sum of the numbers.", "Open a file"], padding=True, return_tensors="pt")
    generated = greedy(model, batch["input_ids"], attention_mask=batch["attention_mask"])
    texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
    assert len(texts) == 2 and all(isinstance(text, str) for text in texts)
    for row, text in enumerate(["Return the sum of the numbers.", "Open a file"]):
        alone = greedy(model, tokenizer(text, return_tensors="pt")["input_ids"])
        assert generated[row].tolist() == alone[0].tolist()


def test_text_classification_pipeline_runs_the_seq2seq_classifier(seq2seq_tokenizer, tiny_model):
    tokenizer = seq2seq_tokenizer
    model = tiny_model("t5-tiny", AutoModelForSequenceClassification, num_labels=2, vocab_size=len(tokenizer))
    classify = pipeline("text-classification", model=model, tokenizer=tokenizer)
    results = classify(["Return the sum of the numbers.", "Open a file"], batch_size=2)
    assert [set(result) for result in results] == [{"label", "score"}] * 2
    single = classify("Open a file")[0]
    assert single["label"] == results[1]["label"] and single["score"] == pytest.approx(results[1]["score"], abs=1e-5)


def test_bart_learns_to_reverse_its_source():
    """Only cross-attention carries the source to the decoder: reversing random token sequences is learnt only if
    it works (the decoder alone would stay at the uniform loss, ln 62 = 4.1)."""
    torch.manual_seed(0)
    config = hfzoo.preset_config(
        "bart-tiny", vocab_size=64, pad_token_id=0, eos_token_id=1, decoder_start_token_id=0, hidden_dropout=0.0,
        attention_dropout=0.0,
    )
    model = AutoModelForSeq2SeqLM.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    for _ in range(120):
        source = torch.randint(2, 64, (32, 8))
        loss = model(input_ids=source, labels=source.flip(-1)).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
    source = torch.randint(2, 64, (64, 8))
    generated = model.eval().generate(input_ids=source, max_new_tokens=9, do_sample=False)
    exact = (generated[:, 1:9] == source.flip(-1)).all(-1).float().mean().item()
    assert exact > 0.5, f"only {exact:.0%} of 64 reversed exactly (last training loss {loss.item():.3f})"
