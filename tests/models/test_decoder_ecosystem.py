"""The decoder family inside the Hugging Face ecosystem: pipelines, Trainer and PEFT, as users call them."""

import math

import pytest
import torch
from datasets import Dataset
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file
from transformers import (
    AutoModelForSequenceClassification,
    DataCollatorForLanguageModeling,
    Trainer,
    TrainingArguments,
    pipeline,
)

import hfzoo

PROMPTS = ["Return the value of", "A list of the", "Create a new dictionary from the keys"]


# ----------------------------------------------------------------------------------------------- pipelines
def test_text_generation_pipeline_batched_from_object_and_from_a_saved_dir(
    decoder_preset, tiny_model, tokenizer, tokenizer_overrides, tmp_path
):
    model = tiny_model(decoder_preset, **tokenizer_overrides)
    generate = dict(max_new_tokens=6, min_new_tokens=6, do_sample=False)
    generator = pipeline("text-generation", model=model, tokenizer=tokenizer)
    batched = [result[0]["generated_text"] for result in generator(PROMPTS, batch_size=3, **generate)]
    one_by_one = [generator(prompt, **generate)[0]["generated_text"] for prompt in PROMPTS]
    # Left padding in a batch must not change what a prompt generates.
    assert batched == one_by_one
    assert all(text.startswith(prompt) and len(text) > len(prompt) for text, prompt in zip(batched, PROMPTS))

    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    from_dir = pipeline("text-generation", model=str(tmp_path))
    assert isinstance(from_dir.model, hfzoo.ZooDecoderForCausalLM)
    assert [result[0]["generated_text"] for result in from_dir(PROMPTS, batch_size=2, **generate)] == batched


def test_text_classification_pipeline_batched(decoder_preset, tiny_model, tokenizer, tokenizer_overrides):
    model = tiny_model(
        decoder_preset, auto_class=AutoModelForSequenceClassification, num_labels=3, **tokenizer_overrides
    )
    assert isinstance(model, hfzoo.ZooDecoderForSequenceClassification)
    classifier = pipeline("text-classification", model=model, tokenizer=tokenizer, top_k=None)
    batched = classifier(PROMPTS, batch_size=3)
    one_by_one = [classifier([prompt])[0] for prompt in PROMPTS]
    for batch_scores, single_scores in zip(batched, one_by_one):
        assert {s["label"] for s in batch_scores} == {"LABEL_0", "LABEL_1", "LABEL_2"}
        by_label = {s["label"]: s["score"] for s in single_scores}
        for score in batch_scores:
            assert score["score"] == pytest.approx(by_label[score["label"]], abs=1e-5)


# ----------------------------------------------------------------------------------------------- Trainer
def test_trainer_runs_three_steps_with_a_finite_loss(
    decoder_preset, tiny_model, tokenizer, tokenizer_overrides, docstring_texts, tmp_path
):
    model = tiny_model(decoder_preset, **tokenizer_overrides).train()
    dataset = Dataset.from_dict({"text": docstring_texts[:24]}).map(
        lambda batch: tokenizer(batch["text"], truncation=True, max_length=48), batched=True, remove_columns=["text"]
    )
    arguments = TrainingArguments(
        output_dir=str(tmp_path),
        max_steps=3,
        per_device_train_batch_size=4,
        learning_rate=1e-3,
        use_cpu=True,
        report_to=[],
        save_strategy="no",
        logging_steps=1,
    )
    trainer = Trainer(
        model=model,
        args=arguments,
        train_dataset=dataset,
        data_collator=DataCollatorForLanguageModeling(tokenizer, mlm=False),
        processing_class=tokenizer,
    )
    result = trainer.train()
    assert trainer.state.global_step == 3
    losses = [entry["loss"] for entry in trainer.state.log_history if "loss" in entry]
    assert len(losses) == 3 and all(math.isfinite(loss) for loss in losses)
    assert math.isfinite(result.training_loss)


# ----------------------------------------------------------------------------------------------- PEFT
def train_steps(model, batch: dict[str, torch.Tensor], steps: int = 3) -> None:
    """A few AdamW steps on `batch`, so that LoRA's B matrices (zero at init) become non-zero."""
    model.train()
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2)
    for _ in range(steps):
        optimizer.zero_grad()
        model(**batch).loss.backward()
        optimizer.step()
    model.eval()


def test_lora_for_causal_lm_without_target_modules(decoder_preset, tiny_model, tmp_path):
    input_ids = torch.tensor([[5, 6, 7, 8, 9, 10], [20, 21, 22, 23, 24, 25]])
    peft_model = get_peft_model(tiny_model(decoder_preset), LoraConfig(task_type="CAUSAL_LM", r=4))
    targeted = {name.rsplit(".", 1)[-1] for name, module in peft_model.named_modules() if hasattr(module, "lora_A")}
    assert targeted == {"qkv_proj"}  # hfzoo's registered default
    train_steps(peft_model, {"input_ids": input_ids, "labels": input_ids})
    lora_b = [p for name, p in peft_model.named_parameters() if "lora_B" in name]
    assert lora_b and all(p.abs().sum() > 0 for p in lora_b)
    with torch.no_grad():
        adapted = peft_model(input_ids).logits
        with peft_model.disable_adapter():
            assert not torch.allclose(peft_model(input_ids).logits, adapted, atol=1e-4)

    peft_model.save_pretrained(tmp_path)
    assert (tmp_path / "adapter_model.safetensors").is_file()
    reloaded = PeftModel.from_pretrained(tiny_model(decoder_preset), tmp_path).eval()
    with torch.no_grad():
        assert torch.equal(reloaded(input_ids).logits, adapted)

    merged = peft_model.merge_and_unload()
    assert isinstance(merged, hfzoo.ZooDecoderForCausalLM)
    assert not any("lora" in name for name, _ in merged.named_parameters())
    with torch.no_grad():
        torch.testing.assert_close(merged(input_ids).logits, adapted, atol=1e-5, rtol=0)


def test_lora_for_sequence_classification_trains_and_saves_the_score_head(decoder_preset, tiny_model, tmp_path):
    def base():
        return tiny_model(decoder_preset, auto_class=AutoModelForSequenceClassification, pad_token_id=0, num_labels=3)

    input_ids = torch.tensor([[0, 0, 7, 8, 9, 10], [20, 21, 22, 23, 24, 25]])
    batch = {"input_ids": input_ids, "attention_mask": (input_ids != 0).long(), "labels": torch.tensor([2, 1])}
    peft_model = get_peft_model(base(), LoraConfig(task_type="SEQ_CLS", r=4))
    assert "score" in peft_model.peft_config["default"].modules_to_save
    initial_score = base().score.weight
    train_steps(peft_model, batch)
    trained_score = peft_model.base_model.model.score.modules_to_save["default"].weight
    assert not torch.allclose(trained_score, initial_score)
    with torch.no_grad():
        adapted = peft_model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits

    peft_model.save_pretrained(tmp_path)
    saved = load_file(tmp_path / "adapter_model.safetensors")
    assert any("score" in key for key in saved) and any("lora_B" in key for key in saved)
    reloaded = PeftModel.from_pretrained(base(), tmp_path).eval()
    with torch.no_grad():
        logits = reloaded(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    assert torch.equal(logits, adapted)
