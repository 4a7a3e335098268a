"""ModernBERT <-> hfzoo, both ways, by the rules test_convert.py sets for every family: equal outputs at the real
tokens (max abs diff <= 1e-4), native -> hfzoo -> native bit-identical in a folder that loads without remote code,
adapters map both ways, and what hfzoo cannot compute is refused by name.

Small random native models with ModernBERT's architecture at test size: four layers, global attention in layers 0
and 3 and a 4-token window in layers 1 and 2 (shorter than the inputs, so ignoring it shows), separate rotary bases
for the two kinds, no biases, a first block without an attention norm; the second row right-padded.
"""

import pytest
import torch
import transformers
from tests.helpers.conversion_checks import (
    TOLERANCE,
    check_lora_from_hfzoo,
    check_lora_from_native,
    check_round_trip,
    max_difference,
    outputs,
)
from tests.helpers.native_models import VOCAB, random_native

import hfzoo
from hfzoo.convert import from_native, to_native

MODERNBERT = dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=4, num_attention_heads=4, intermediate_size=48,
    max_position_embeddings=64, local_attention=4, global_attn_every_n_layers=3, global_rope_theta=160000.0,
    local_rope_theta=10.0, pad_token_id=0, bos_token_id=1, eos_token_id=2, cls_token_id=1, sep_token_id=2,
)  # fmt: skip
HEADS = [
    "ModernBertModel", "ModernBertForMaskedLM", "ModernBertForSequenceClassification",
    "ModernBertForTokenClassification", "ModernBertForQuestionAnswering", "ModernBertForMultipleChoice",
]  # fmt: skip
VARIANTS = {
    "biases": dict(norm_bias=True, attention_bias=True, mlp_bias=True, classifier_bias=True),
    "global-only": dict(global_attn_every_n_layers=1),
    "untied": dict(tie_word_embeddings=False),
}
# ModernBERT-base's own config pools the mean for its sequence classifier.
POOLED_HEADS = ["ModernBertForSequenceClassification", "ModernBertForMultipleChoice"]


def native_modernbert(head: str, seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    config = transformers.ModernBertConfig(**{**MODERNBERT, "initializer_range": 0.2, **overrides})
    return random_native(head, config, seed)


def modernbert_inputs(head: str) -> dict:
    generator = torch.Generator().manual_seed(1)
    ids = torch.randint(4, VOCAB, (2, 11), generator=generator)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    ids[1, -3:] = 0
    inputs["attention_mask"][1, -3:] = 0
    if head.endswith("MultipleChoice"):
        inputs = {name: tensor[:, None].expand(-1, 3, -1).contiguous() for name, tensor in inputs.items()}
    return inputs


@pytest.mark.parametrize("head", HEADS)
def test_modernbert_heads_import_with_equal_outputs_and_come_back_bit_identical(head, tmp_path):
    imported, exported = check_round_trip(native_modernbert(head), head, tmp_path, modernbert_inputs(head))
    print(f"{head}: native -> hfzoo max abs diff {imported:.2e}, hfzoo -> native {exported:.2e}")


@pytest.mark.parametrize("head", POOLED_HEADS)
def test_mean_pooling_imports_with_equal_outputs(head, tmp_path):
    native = native_modernbert(head, classifier_pooling="mean")
    check_round_trip(native, head, tmp_path, modernbert_inputs(head))
    zoo = from_native(native)
    assert zoo.config.classifier_pooling == "mean"
    inputs = modernbert_inputs(head)
    zoo.config.classifier_pooling = "cls"
    assert max_difference(outputs(native, inputs), outputs(zoo, inputs), inputs) > 100 * TOLERANCE, "mean must matter"


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_modernbert_settings_import_with_equal_outputs(variant, tmp_path):
    head = "ModernBertForMaskedLM"
    check_round_trip(native_modernbert(head, **VARIANTS[variant]), head, tmp_path, modernbert_inputs(head))


def test_the_local_window_and_its_rotary_base_matter():
    """The imported model reads both: with every layer global, or one rotary base, its outputs move."""
    native = native_modernbert("ModernBertModel")
    inputs = modernbert_inputs("ModernBertModel")
    expected = outputs(native, inputs)
    for change in ({"local_attention_window": None}, {"local_rope_theta": None}):
        zoo = from_native(native)
        config = hfzoo.ZooEncoderConfig(**{**zoo.config.to_dict(), **change})
        changed = hfzoo.ZooEncoderModel(config).eval()
        changed.load_state_dict(zoo.state_dict())
        assert max_difference(expected, outputs(changed, inputs), inputs) > 100 * TOLERANCE, change


@pytest.mark.parametrize("option,value,named", [
    ("classifier_bias", True, "classifier_bias=True"),
    ("classifier_activation", "silu", "classifier_activation='silu'"),
    ("decoder_bias", False, "decoder_bias=False"),
    ("hidden_activation", "relu", "hidden_activation='relu'"),
    ("layer_types", ["sliding_attention", "full_attention", "full_attention", "full_attention"], "layer_types="),
])  # fmt: skip
def test_modernbert_options_hfzoo_cannot_compute_are_refused(option, value, named):
    native = native_modernbert("ModernBertForMaskedLM")
    setattr(native.config, option, value)
    with pytest.raises(ValueError, match=named.replace("[", r"\[")):
        from_native(native)


def test_rotary_scaling_is_refused():
    native = native_modernbert("ModernBertModel")
    native.config.rope_parameters["sliding_attention"] = {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}
    with pytest.raises(ValueError, match="rope_type='linear'"):
        from_native(native)


@pytest.mark.parametrize("overrides,named", [
    ({}, "first_block_attention_norm=True"),
    ({"first_block_attention_norm": False}, "classifier_transform=False"),
])  # fmt: skip
def test_the_modernbert_presets_name_what_modernbert_lacks(overrides, named, tmp_path):
    """The `modernbert-*` presets keep the first block's attention norm and BERT's bare heads; the export names
    the switch (with both set, the preset exports)."""
    config = hfzoo.preset_config("modernbert-tiny", vocab_size=VOCAB, **overrides)
    with pytest.raises(ValueError, match=named):
        to_native(hfzoo.ZooEncoderForMaskedLM(config), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_an_hfzoo_model_with_modernbert_switches_exports_with_equal_outputs(tmp_path):
    config = hfzoo.preset_config(
        "modernbert-tiny", vocab_size=VOCAB, hidden_size=32, num_attention_heads=4, num_hidden_layers=4,
        intermediate_size=48, first_block_attention_norm=False, classifier_transform=True, local_attention_window=4,
        global_attention_every_n_layers=3, local_rope_theta=10.0, initializer_range=0.2,
    )  # fmt: skip
    torch.manual_seed(0)
    zoo = hfzoo.ZooEncoderForTokenClassification(config).eval()
    native = to_native(zoo, tmp_path)
    assert type(native).__name__ == "ModernBertForTokenClassification"
    inputs = modernbert_inputs("ModernBertForTokenClassification")
    difference = max_difference(outputs(zoo, inputs), outputs(native, inputs), inputs)
    print(f"modernbert-tiny, ModernBERT's switches -> {type(native).__name__}: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE


def test_lora_trained_on_hfzoo_maps_to_modernbert_and_back_bit_identical(tmp_path):
    native = native_modernbert("ModernBertForSequenceClassification")
    check_lora_from_hfzoo(native, modernbert_inputs(""), tmp_path, "modernbert")


@pytest.mark.parametrize("targets", [["Wqkv", "Wi"], "all-linear"], ids=["fused", "all-linear"])
def test_lora_trained_on_modernbert_gives_the_same_outputs_on_hfzoo(targets, tmp_path):
    """PEFT has no default ModernBERT targets: its fused projections, and every linear layer (the head's transform
    too)."""
    native = native_modernbert("ModernBertForSequenceClassification")
    check_lora_from_native(native, modernbert_inputs(""), tmp_path, targets, "modernbert")


def test_eager_and_sdpa_apply_the_local_window_alike():
    native = native_modernbert("ModernBertModel")
    inputs = modernbert_inputs("ModernBertModel")
    zoo = from_native(native)
    eager = hfzoo.ZooEncoderModel(hfzoo.ZooEncoderConfig(**{**zoo.config.to_dict(), "attn_implementation": "eager"}))
    eager.load_state_dict(zoo.state_dict())
    assert max_difference(outputs(zoo, inputs), outputs(eager.eval(), inputs), inputs) <= TOLERANCE


@pytest.mark.parametrize("settings,named", [
    ({"first_block_attention_norm": False, "norm_position": "post"}, "first_block_attention_norm=False"),
    ({"local_rope_theta": 10.0, "position_embedding": "learned"}, "local_rope_theta=10.0"),
    ({"local_attention_window": 1}, "local_attention_window must be None or >= 2"),
    ({"global_attention_every_n_layers": 0}, "global_attention_every_n_layers must be >= 1"),
    ({"classifier_pooling": "mean", "add_pooling_layer": True}, "classifier_pooling='mean' averages"),
])  # fmt: skip
def test_modernbert_switches_are_checked_when_the_config_is_made(settings, named):
    with pytest.raises(ValueError, match=named):
        hfzoo.preset_config("modernbert-tiny", **settings)
