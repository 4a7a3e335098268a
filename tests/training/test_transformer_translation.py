"""The original Transformer's training in the fine-tuning recipe (issue 18 item 6): the inverse square root schedule as
the optimizer applies it, label smoothing as torch defines it (0 = the model's own loss), a joint source+target
tokenizer trained on the task's data and saved with the model, a tiny end-to-end run from a preset with all of them
and beam search at the final evaluation, and bad values refused naming the key.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from tests.helpers.recipe_runs import run_finetune as run
from tests.helpers.schedules import PEAK, applied_learning_rates
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoTokenizer

import hfzoo
from hfzoo.commands.finetune import parse_args
from hfzoo.tasks import TASK_CLASSES, load_examples
from hfzoo.tasks import seq2seq as seq2seq_module
from hfzoo.tasks.seq2seq import TextPair
from hfzoo.training.logging import read_log
from hfzoo.training.loop import build_inverse_sqrt_scheduler
from hfzoo.training.losses import label_smoothed_loss, smoothed_loss_function
from hfzoo.training.task_model import train_task_tokenizer


def multi30k_args(data: Path, *extra: str, model: str = "transformer-tiny", from_scratch: bool = True) -> list[str]:
    return ["--task", "seq2seq", "--dataset", str(data / "multi30k"), "--text_column", "en", "--target_column", "de",
            "--model", model, "--from_scratch", str(from_scratch).lower(), *extra]  # fmt: skip


def test_the_applied_learning_rate_warms_up_linearly_then_decays_as_one_over_sqrt_step():
    warmup, steps = 4, 64
    applied = applied_learning_rates(lambda optimizer: build_inverse_sqrt_scheduler(optimizer, warmup), steps)
    # Update n (1-based) uses PEAK * min(n / warmup, sqrt(warmup / n)) (Vaswani et al., eq. 3, scaled to its peak).
    assert applied[:warmup] == pytest.approx([PEAK * n / warmup for n in range(1, warmup + 1)], rel=1e-12)
    assert max(applied) == pytest.approx(PEAK) and applied.index(max(applied)) == warmup - 1
    after = range(warmup, steps + 1)
    assert applied[warmup - 1 :] == pytest.approx([PEAK * math.sqrt(warmup / n) for n in after], rel=1e-12)
    assert applied[4 * warmup - 1] == pytest.approx(PEAK / 2)  # 4x the warmup: half the peak
    assert applied[-1] == pytest.approx(PEAK / 4)  # 16x: a quarter, never zero


def seq2seq_batch(vocab: int) -> dict[str, torch.Tensor]:
    torch.manual_seed(0)
    input_ids = torch.randint(4, vocab, (3, 7))
    labels = torch.randint(4, vocab, (3, 5))
    labels[0, 3:] = -100  # padding
    return {"input_ids": input_ids, "attention_mask": torch.ones_like(input_ids), "labels": labels}


def test_label_smoothing_is_torch_cross_entropy_with_label_smoothing_and_zero_is_the_models_loss():
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(hfzoo.preset_config("transformer-tiny")).eval()
    batch = seq2seq_batch(model.config.vocab_size)
    outputs = model(**batch)
    logits, labels = outputs.logits, batch["labels"]
    for smoothing in (0.1, 0.3):
        expected = torch.nn.CrossEntropyLoss(label_smoothing=smoothing, ignore_index=-100)(
            logits.reshape(-1, logits.shape[-1]), labels.reshape(-1)
        )
        smoothed = label_smoothed_loss(logits, labels, smoothing, shift=False)
        assert smoothed.item() == pytest.approx(expected.item(), rel=1e-6)
        assert expected.item() > outputs.loss.item()  # the smoothed targets are further from a peaked prediction
    assert label_smoothed_loss(logits, labels, 0.0, shift=False).item() == pytest.approx(outputs.loss.item(), rel=1e-6)

    # A causal LM predicts the next token: with 0 the shifted loss is its own loss again.
    decoder = AutoModelForCausalLM.from_config(hfzoo.preset_config("gpt-tiny")).eval()
    ids = batch["input_ids"]
    decoder_outputs = decoder(input_ids=ids, labels=ids)
    shifted = label_smoothed_loss(decoder_outputs.logits, ids, 0.0, shift=True)
    assert shifted.item() == pytest.approx(decoder_outputs.loss.item(), rel=1e-6)


def test_the_recipes_loss_function_smooths_the_models_targets(shared_data):
    config = parse_args(multi30k_args(shared_data, "--train_tokenizer", "true", "--label_smoothing", "0.2")).data
    task = TASK_CLASSES["seq2seq"](config)
    task.bind(None, "encoder_decoder")
    assert smoothed_loss_function(task, Accelerator(cpu=True), 0.0) is None  # the model's own loss
    torch.manual_seed(0)
    model = AutoModelForSeq2SeqLM.from_config(hfzoo.preset_config("transformer-tiny")).eval()
    batch = seq2seq_batch(model.config.vocab_size)
    loss = smoothed_loss_function(task, Accelerator(cpu=True), 0.2)(model, batch)
    logits = model(**batch).logits
    expected = torch.nn.functional.cross_entropy(logits.flatten(0, 1), batch["labels"].flatten(), label_smoothing=0.2)
    assert loss.item() == pytest.approx(expected.item(), rel=1e-6)


def pieces_per_word(tokenizer, sentences: list[str]) -> float:
    words = [word for sentence in sentences for word in sentence.split()]
    return sum(len(tokenizer.tokenize(sentence)) for sentence in sentences) / len(words)


def test_the_joint_tokenizer_covers_both_languages(shared_data):
    config = parse_args(multi30k_args(shared_data, "--train_tokenizer", "true", "--max_train_samples", "4000")).data
    task = TASK_CLASSES["seq2seq"](config)
    train, validation = load_examples(task, config)
    joint = train_task_tokenizer(config, task, train, "bpe", 2000)
    english_pairs = [TextPair(e.source, e.source, e.where) for e in train]
    english_only = train_task_tokenizer(config, task, english_pairs, "bpe", 2000)
    german = [e.target for e in validation[:200]]
    english = [e.source for e in validation[:200]]
    # German words are a piece or two, not spelled out in English fragments; English barely pays for the sharing.
    # German words take under 2 pieces each (punctuation counted), not spelled out in English fragments (3.6 with an
    # English-only vocabulary of the same size), and English pays little for sharing the vocabulary.
    joint_german, english_only_german = pieces_per_word(joint, german), pieces_per_word(english_only, german)
    assert joint_german < 2 and joint_german < 0.6 * english_only_german
    assert pieces_per_word(joint, english) < 1.2 * pieces_per_word(english_only, english)
    for word in ("Männer", "Straße", "spielen", "Hund"):
        assert len(joint.tokenize(f" {word}")) <= 2, joint.tokenize(f" {word}")
    # The encoder-decoder's special tokens, no T5 sentinels: pad 0 (the decoder's start), eos 1 appended.
    assert (joint.pad_token_id, joint.eos_token_id) == (0, 1)
    assert joint(german[0])["input_ids"][-1] == 1 and len(joint.all_special_tokens) == 4
    assert joint.decode(joint(german[0])["input_ids"], skip_special_tokens=True) == german[0]
    # Deterministic: a resumed run trains the very same vocabulary again.
    assert train_task_tokenizer(config, task, train, "bpe", 2000).get_vocab() == joint.get_vocab()


def test_a_tiny_run_trains_the_transformer_with_all_its_options(shared_data, tmp_path, monkeypatch):
    beams = []
    generate = seq2seq_module.generate_texts

    def spy(model, batch, tokenizer, family, max_new_tokens, num_beams):
        beams.append(num_beams)
        return generate(model, batch, tokenizer, family, max_new_tokens, num_beams)

    monkeypatch.setattr(seq2seq_module, "generate_texts", spy)
    out = tmp_path / "run"
    run(*multi30k_args(
        shared_data, "--train_tokenizer", "true", "--vocab_size", "600", "--label_smoothing", "0.1",
        "--lr_schedule", "inverse_sqrt", "--warmup_steps", "2", "--learning_rate", str(PEAK), "--num_beams", "3",
        "--max_steps", "6", "--log_every", "1", "--max_train_samples", "64", "--max_eval_samples", "6",
        "--per_device_batch_size", "8", "--output_dir", str(out),
    ))  # fmt: skip
    assert beams and set(beams) == {3}  # the final evaluation searched with 3 beams
    log = read_log(out)
    # The logged learning rate is the one for the next update (n = step + 1): the inverse square root schedule.
    logged = {r["step"]: r["lr"] for r in log if r["event"] == "train"}
    assert logged == pytest.approx({s: PEAK * min((s + 1) / 2, math.sqrt(2 / (s + 1))) for s in range(1, 7)})
    # The joint tokenizer is saved with the model, which is sized to it, and reloads to the same pieces.
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert AutoConfig.from_pretrained(out).vocab_size == len(tokenizer) <= 600
    sentence = "Zwei junge weiße Männer sind im Freien."
    assert tokenizer.decode(tokenizer(sentence)["input_ids"], skip_special_tokens=True) == sentence
    model = AutoModelForSeq2SeqLM.from_pretrained(out)
    assert model.get_input_embeddings().num_embeddings == len(tokenizer)
    metrics = (out / "metrics.json").read_text()
    assert '"bleu"' in metrics and '"model": "transformer-tiny"' in metrics


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--train_tokenizer", "true", "--label_smoothing", "1.0"], "'label_smoothing' must be in [0, 1)"),
        (["--train_tokenizer", "true", "--label_smoothing", "-0.1"], "'label_smoothing' must be in [0, 1)"),
        (["--train_tokenizer", "true", "--lr_schedule", "inverse_square_root"], "inverse_sqrt"),
        (["--train_tokenizer", "true", "--warmup_steps", "0"], "warmup_steps"),
        (["--train_tokenizer", "true", "--warmup_steps", "10", "--warmup_ratio", "0.1"], "'warmup_steps' and "),
        (["--vocab_size", "4000", "--tokenizer", "x"], "'vocab_size' and 'tokenizer_kind'"),
        (["--train_tokenizer", "true", "--tokenizer", "x"], "'train_tokenizer' and 'tokenizer'"),
        (["--train_tokenizer", "true", "--tokenizer_kind", "sentencepiece"], "tokenizer_kind"),
        ([], "has no tokenizer: add --train_tokenizer true"),
    ],
)
def test_bad_values_are_refused_naming_the_key(shared_data, extra, message):
    with pytest.raises((ValueError, SystemExit)) as error:
        parse_args(multi30k_args(shared_data, *extra))
    assert message in str(error.value)


def test_a_preset_needs_from_scratch_and_a_pretrained_model_keeps_its_tokenizer(shared_data):
    with pytest.raises(ValueError, match="'model': transformer-tiny is a preset.*add --from_scratch true"):
        parse_args(multi30k_args(shared_data, from_scratch=False))
    with pytest.raises(ValueError, match="'train_tokenizer': a new vocabulary does not fit the pretrained"):
        parse_args(multi30k_args(shared_data, "--train_tokenizer", "true", model="runs/any", from_scratch=False))
    with pytest.raises(ValueError, match="'label_smoothing' smooths token or class labels"):
        parse_args(["--task", "question-answering", "--dataset", str(shared_data / "squad"), "--model", "runs/any",
                    "--label_smoothing", "0.1"])  # fmt: skip
