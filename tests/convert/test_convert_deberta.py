"""DeBERTa-v2/v3 <-> hfzoo, both ways, by the rules test_convert.py sets for every family: equal outputs at the real
tokens (max abs diff <= 1e-4), native -> hfzoo -> native bit-identical in a folder that loads without remote code,
the `deberta-*` presets export as built, adapters map both ways, and what hfzoo cannot compute is refused by name.

Small random native models (DeBERTa-v3's settings at test size: 8 log buckets over 16 positions, so the test
inputs reach the logarithmic buckets; no absolute positions, shared position projections, LayerNorm on the
relative embeddings); the second row right-padded.
"""

import json

import pytest
import torch
import transformers
from peft import PeftModel, get_peft_model
from tests.helpers.conversion_checks import (
    TOLERANCE,
    check_lora_from_hfzoo,
    check_lora_from_native,
    check_on_native,
    check_round_trip,
    gap,
    logits,
    max_difference,
    outputs,
    saved,
)
from tests.helpers.native_models import VOCAB, deberta_inputs, random_native, zoo_model

import hfzoo
from hfzoo.adapters import BottleneckConfig
from hfzoo.convert import adapter_from_native, from_native, to_native

V3 = dict(
    vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=48,
    max_position_embeddings=64, type_vocab_size=0, relative_attention=True, position_buckets=8,
    max_relative_positions=16, pos_att_type="p2c|c2p", norm_rel_ebd="layer_norm", share_att_key=True,
    position_biased_input=False, layer_norm_eps=1e-7,
)  # fmt: skip
HEADS = [
    "DebertaV2Model", "DebertaV2ForMaskedLM", "DebertaV2ForSequenceClassification", "DebertaV2ForTokenClassification",
    "DebertaV2ForQuestionAnswering", "DebertaV2ForMultipleChoice",
]  # fmt: skip
# Other settings a DeBERTa checkpoint has: v1's clipped distances without buckets (max_relative_positions -1 means
# max_position_embeddings), one position term, segment embeddings, BERT's tanh pooler, the legacy MLM head untied.
VARIANTS = {
    "no-buckets": dict(position_buckets=-1, max_relative_positions=-1, max_position_embeddings=12),
    "c2p-only": dict(pos_att_type=["c2p"]),
    "p2c-only": dict(pos_att_type=["p2c"]),
    "token-types": dict(type_vocab_size=2),
    "tanh-pooler": dict(pooler_hidden_act="tanh"),
    # DeBERTa-v2 xlarge/xxlarge: the convolution branch after the first block.
    "convolution": dict(conv_kernel_size=3, conv_act="gelu"),
    "grouped-convolution": dict(conv_kernel_size=5, conv_groups=4),
}


def native_deberta(head: str, seed: int = 0, **overrides) -> transformers.PreTrainedModel:
    return random_native(head, transformers.DebertaV2Config(**{**V3, "initializer_range": 0.2, **overrides}), seed)


@pytest.mark.parametrize("head", HEADS)
def test_deberta_v3_heads_import_with_equal_outputs_and_come_back_bit_identical(head, tmp_path):
    imported, exported = check_round_trip(native_deberta(head), head, tmp_path)
    print(f"{head}: native -> hfzoo max abs diff {imported:.2e}, hfzoo -> native {exported:.2e}")


def test_the_masked_lm_head_of_microsofts_checkpoints_comes_back_in_its_layout(tmp_path):
    """`legacy=False` (`lm_predictions.lm_head.*`, the keys of microsoft/deberta-v3-*): exported the same way."""
    native = native_deberta("DebertaV2ForMaskedLM", legacy=False)
    check_round_trip(native, "DebertaV2ForMaskedLM", tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["legacy"] is False


@pytest.mark.parametrize("variant", list(VARIANTS))
def test_deberta_settings_import_with_equal_outputs(variant, tmp_path):
    head = "DebertaV2ForSequenceClassification"
    check_round_trip(native_deberta(head, **VARIANTS[variant]), head, tmp_path)


@pytest.mark.parametrize("option,value,named", [
    ("position_biased_input", True, "position_biased_input=True"),
    ("relative_attention", False, "relative_attention=False"),
    ("share_att_key", False, "share_att_key=False"),
    ("conv_act", "softmax", "conv_act='softmax'"),
    ("norm_rel_ebd", "none", "norm_rel_ebd='none'"),
    ("embedding_size", 16, "embedding_size=16"),
    ("pos_att_type", [], r"pos_att_type=\[\]"),
    ("hidden_act", "tanh", "hidden_act='tanh'"),
])  # fmt: skip
def test_deberta_options_hfzoo_cannot_compute_are_refused(option, value, named):
    native = native_deberta("DebertaV2Model")
    setattr(native.config, option, value)
    with pytest.raises(ValueError, match=named):
        from_native(native)


def deberta_preset_model(head, **overrides) -> transformers.PreTrainedModel:
    return zoo_model("deberta-tiny", head, position_buckets=8, max_relative_positions=16, initializer_range=0.2,
                     **overrides)  # fmt: skip


@pytest.mark.parametrize("head,auto_class", [
    (hfzoo.ZooEncoderForMaskedLM, transformers.AutoModelForMaskedLM),
    (hfzoo.ZooEncoderForSequenceClassification, transformers.AutoModelForSequenceClassification),
])  # fmt: skip
def test_the_deberta_preset_exports_as_built(head, auto_class, tmp_path):
    """A `deberta-*` preset is DeBERTa-v3's encoder with its GELU pooler: no family or override is named."""
    zoo = deberta_preset_model(head)
    to_native(zoo, tmp_path)
    native = auto_class.from_pretrained(tmp_path).eval()
    assert type(native).__name__.startswith("DebertaV2") and native.config.pooler_hidden_act == "gelu"
    inputs = deberta_inputs(type(native).__name__, native.config)
    difference = max_difference(outputs(zoo, inputs), outputs(native, inputs), inputs)
    print(f"deberta-tiny {head.__name__} -> {type(native).__name__}: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE


@pytest.mark.parametrize("head,overrides,named", [
    (hfzoo.ZooEncoderModel, {}, "add_pooling_layer=True"),
    (hfzoo.ZooEncoderForSequenceClassification, {"add_pooling_layer": False}, "add_pooling_layer=False"),
    (hfzoo.ZooEncoderForMaskedLM, {"num_key_value_heads": 2}, "num_key_value_heads=2"),
    (hfzoo.ZooEncoderForMaskedLM, {"norm_position": "pre"}, "norm_position='pre'"),
])  # fmt: skip
def test_what_deberta_cannot_express_is_refused_before_writing(head, overrides, named, tmp_path):
    with pytest.raises(ValueError, match=named):
        to_native(deberta_preset_model(head, **overrides), tmp_path / "out")
    assert not (tmp_path / "out").exists()


def test_lora_trained_on_hfzoo_maps_to_deberta_and_back_bit_identical(tmp_path):
    native = native_deberta("DebertaV2ForSequenceClassification")
    check_lora_from_hfzoo(native, deberta_inputs("", native.config), tmp_path, "deberta-v2")


@pytest.mark.parametrize("targets", [None, "all-linear"], ids=["peft-default", "all-linear"])
def test_lora_trained_on_deberta_gives_the_same_outputs_on_hfzoo(targets, tmp_path):
    """PEFT's default DeBERTa targets (query_proj, key_proj, value_proj and every `dense`, the pooler's included) and
    every linear layer: the position projections are the adapted query and key projections on both sides."""
    native = native_deberta("DebertaV2ForSequenceClassification")
    check_lora_from_native(native, deberta_inputs("", native.config), tmp_path, targets, "deberta-v2")


def test_bottleneck_adapters_map_both_ways_on_deberta(tmp_path):
    head = "DebertaV2ForTokenClassification"
    native = native_deberta(head)
    inputs = deberta_inputs(head, native.config)
    torch.manual_seed(5)
    config = BottleneckConfig(variant="houlsby", reduction_factor=4, init_weights=False, task_type="TOKEN_CLS")
    zoo = get_peft_model(from_native(native), config).eval()
    _, expected, adapted = check_on_native(zoo, native, inputs, tmp_path, "deberta-v2 bottleneck")
    fresh = from_native(native_deberta(head))
    back = adapter_from_native(saved(adapted, tmp_path / "native-saved"), tmp_path / "back", fresh)
    difference = gap(logits(PeftModel.from_pretrained(fresh, back).eval(), inputs), expected, inputs)
    print(f"deberta-v2 native -> hfzoo bottleneck: max abs diff {difference:.2e}")
    assert difference <= TOLERANCE


@pytest.mark.parametrize("settings,named", [
    ({"pooler_activation": "softmax"}, "pooler_activation='softmax'"),
    ({"conv_activation": "softmax"}, "conv_activation='softmax'"),
    ({"conv_kernel_size": 2}, "conv_kernel_size must be 0 .no convolution. or odd, got 2"),
    ({"conv_kernel_size": 3, "conv_groups": 3}, r"conv_groups \(3\) must divide hidden_size \(128\)"),
])  # fmt: skip
def test_the_deberta_switches_are_checked_when_the_config_is_made(settings, named):
    assert hfzoo.preset_config("bert-tiny").pooler_activation == "tanh"  # BERT's pooler is unchanged
    with pytest.raises(ValueError, match=named):
        hfzoo.preset_config("deberta-tiny", **settings)
