"""BERT's pretraining head (masked LM + next-sentence prediction) conforms like every head: Auto class, safetensors
round trip, remote code without hfzoo, LoRA without target modules, its encoder and pooler carried into fine-tuning;
its loss is the masked-LM loss plus the NSP cross-entropy. And a keyword argument no model takes is refused by every
family, naming it, while transformers' own keyword arguments still pass."""

import json

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from tests.helpers.encoder_batches import ENCODER_PRESETS, SAME, masked_labels, right_padded_batch
from transformers import (
    AutoModelForCausalLM,
    AutoModelForMaskedLM,
    AutoModelForPreTraining,
    AutoModelForQuestionAnswering,
    AutoModelForSeq2SeqLM,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from hfzoo.models import ZooEncoderForPreTraining, ZooEncoderForReplacedTokenDetection

NEXT_SENTENCE_LABEL = torch.tensor([0, 1, 1])  # one per row of `right_padded_batch`


def pretraining_batch() -> dict[str, torch.Tensor]:
    batch = right_padded_batch()
    return {**batch, "labels": masked_labels(batch["input_ids"], batch["attention_mask"])}


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_round_trips_through_auto_model_for_pretraining(preset, tiny_model, tmp_path):
    model = tiny_model(preset, AutoModelForPreTraining)
    assert type(model) is ZooEncoderForPreTraining
    model.save_pretrained(tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir() if path.suffix in (".safetensors", ".bin", ".pt")) == [
        "model.safetensors"
    ]
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    # DeBERTa's position kind is a component file, which the module written beside the encoder's imports.
    module = "modeling_encoder_components" if model.config.position_embedding == "disentangled" else "modeling_encoder"
    assert auto_map["AutoModelForPreTraining"] == f"{module}.ZooEncoderForPreTraining"
    loaded = AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        expected, output = model(**right_padded_batch()), loaded(**right_padded_batch())
    torch.testing.assert_close(output.prediction_logits, expected.prediction_logits, **SAME)
    torch.testing.assert_close(output.seq_relationship_logits, expected.seq_relationship_logits, **SAME)


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_loss_is_the_masked_lm_loss_plus_the_next_sentence_cross_entropy(preset, tiny_model, tmp_path):
    model = tiny_model(preset, AutoModelForPreTraining)
    batch = pretraining_batch()
    with torch.no_grad():
        both = model(**batch, next_sentence_label=NEXT_SENTENCE_LABEL)
        masked_lm_only = model(**batch)
    assert both.seq_relationship_logits.shape == (3, 2)
    nsp = F.cross_entropy(both.seq_relationship_logits, NEXT_SENTENCE_LABEL)
    torch.testing.assert_close(both.loss, masked_lm_only.loss + nsp)
    assert not torch.isclose(both.loss, masked_lm_only.loss)  # the label is used, not dropped
    # The masked-LM part is exactly the masked-LM head's loss (unshifted labels) with the same weights.
    model.save_pretrained(tmp_path)
    masked_lm = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    with torch.no_grad():
        torch.testing.assert_close(masked_lm(**batch).loss, masked_lm_only.loss, **SAME)
        nsp_only = model(**right_padded_batch(), next_sentence_label=NEXT_SENTENCE_LABEL).loss
    torch.testing.assert_close(nsp_only, nsp)


def test_training_projects_only_the_masked_positions_and_both_heads_get_gradients(tiny_model):
    model = tiny_model("bert-tiny", AutoModelForPreTraining).train()
    batch = pretraining_batch()
    output = model(**batch, next_sentence_label=NEXT_SENTENCE_LABEL)
    assert output.prediction_logits.shape == (int((batch["labels"] != -100).sum()), model.config.vocab_size)
    output.loss.backward()
    for name in ("seq_relationship.weight", "model.pooler.dense.weight", "lm_head.dense.weight"):
        assert model.get_parameter(name).grad.abs().sum() > 0, name


def test_pretraining_checkpoint_carries_encoder_and_pooler_into_the_classifier(tiny_model, tmp_path):
    pretrained = tiny_model("bert-tiny", AutoModelForPreTraining)
    pretrained.save_pretrained(tmp_path)
    classifier, info = AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    assert torch.equal(classifier.model.pooler.dense.weight, pretrained.model.pooler.dense.weight)


def test_lora_needs_no_target_modules_and_merges_exactly(tiny_model):
    model = tiny_model("bert-tiny", AutoModelForPreTraining)
    peft_model = get_peft_model(model, LoraConfig(r=4, init_lora_weights=False))
    batch = {**pretraining_batch(), "next_sentence_label": NEXT_SENTENCE_LABEL}
    with torch.no_grad():
        adapted = peft_model(**batch)
        merged = peft_model.merge_and_unload()(**batch)
    torch.testing.assert_close(merged.seq_relationship_logits, adapted.seq_relationship_logits, atol=1e-5, rtol=0)
    torch.testing.assert_close(merged.loss, adapted.loss, atol=1e-5, rtol=0)


REMOTE_LOAD_SCRIPT = """
import sys
import torch
from transformers import AutoModelForPreTraining

discriminator_folder, folder, inputs_file, results_file = sys.argv[1:]
discriminator = AutoModelForPreTraining.from_pretrained(discriminator_folder, trust_remote_code=True)
model = AutoModelForPreTraining.from_pretrained(folder, trust_remote_code=True).eval()
assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
with torch.no_grad():
    output = model(**torch.load(inputs_file))
torch.save((type(discriminator).__name__, output.loss, output.seq_relationship_logits), results_file)
"""


def test_remote_code_loads_where_hfzoo_is_not_importable(tiny_model, tmp_path, hfzoo_free_python):
    """After an ELECTRA discriminator saved in a folder of the same name, by the same code: transformers maps a
    remote config class to the head it first loaded for an Auto class (`ZooPreTrainedModel.from_pretrained`)."""
    model = tiny_model("bert-tiny", AutoModelForPreTraining)
    model.save_pretrained(tmp_path / "model")
    ZooEncoderForReplacedTokenDetection(model.config).save_pretrained(tmp_path / "electra" / "model")
    batch = {**pretraining_batch(), "next_sentence_label": NEXT_SENTENCE_LABEL}
    torch.save(batch, tmp_path / "inputs.pt")
    process = hfzoo_free_python.run(REMOTE_LOAD_SCRIPT, tmp_path, "electra/model", "model", "inputs.pt", "results.pt")
    assert process.returncode == 0, process.stderr[-3000:]
    discriminator, loss, seq_relationship_logits = torch.load(tmp_path / "results.pt")
    assert discriminator == "ZooEncoderForReplacedTokenDetection"
    with torch.no_grad():
        expected = model(**batch)
    torch.testing.assert_close(loss, expected.loss, **SAME)
    torch.testing.assert_close(seq_relationship_logits, expected.seq_relationship_logits, **SAME)


# ------------------------------------------------------------------------------------ unknown keyword arguments
FAMILY_HEADS = [
    ("gpt-tiny", AutoModelForCausalLM),
    ("llama-tiny", AutoModelForSequenceClassification),
    ("llama-moe-tiny", AutoModelForTokenClassification),
    ("bert-tiny", AutoModelForMaskedLM),
    ("roberta-tiny", AutoModelForQuestionAnswering),
    ("bert-tiny", AutoModelForPreTraining),
    ("t5-tiny", AutoModelForSeq2SeqLM),
    ("bart-tiny", AutoModelForSequenceClassification),
]


def family_inputs(preset: str) -> dict[str, torch.Tensor]:
    batch = right_padded_batch()
    inputs = {"input_ids": batch["input_ids"] % 200 + 3, "attention_mask": batch["attention_mask"]}
    if preset.startswith(("t5", "bart")):
        inputs["input_ids"][:, -1] = 1  # the sequence classifier reads each row's last eos (eos_token_id=1)
        inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
        inputs["decoder_input_ids"] = inputs["input_ids"][:, :4]
    if preset.startswith("bart"):
        del inputs["decoder_input_ids"]
    return inputs


@pytest.mark.parametrize("preset, auto_class", FAMILY_HEADS, ids=lambda x: getattr(x, "__name__", x))
def test_an_unknown_keyword_argument_is_refused_naming_it(preset, auto_class, tiny_model):
    overrides = {"pad_token_id": 0, "eos_token_id": 1} if "SequenceClassification" in auto_class.__name__ else {}
    model = tiny_model(preset, auto_class, **overrides)
    inputs = family_inputs(preset)
    with torch.no_grad():
        # transformers' own keyword arguments and a tokenizer's token types pass as before.
        output = model(
            **inputs, output_attentions=True, output_hidden_states=True, num_items_in_batch=5, token_type_ids=None
        )
        assert output.get("hidden_states", output.get("decoder_hidden_states")) is not None
        with pytest.raises(TypeError, match=r"unexpected keyword argument\(s\) 'atention_mask'"):
            model(**inputs, atention_mask=inputs["attention_mask"])


def test_the_masked_lm_refuses_a_next_sentence_label_instead_of_dropping_it(tiny_model):
    model = tiny_model("bert-tiny", AutoModelForMaskedLM)
    with pytest.raises(TypeError, match="'next_sentence_label'"):
        model(**pretraining_batch(), next_sentence_label=NEXT_SENTENCE_LABEL)
