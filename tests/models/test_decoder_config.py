"""Config validation: a combination that cannot work fails when the config is made, naming what to change."""

import json

import pytest
from transformers import AutoConfig

import hfzoo
from hfzoo import ZooDecoderConfig

# (overrides, words the message must contain)
INVALID = {
    "hidden not divisible by heads": (
        {"hidden_size": 100, "num_attention_heads": 3},
        ["hidden_size", "num_attention_heads"],
    ),
    "heads not divisible by kv heads": ({"num_attention_heads": 4, "num_key_value_heads": 3}, ["num_key_value_heads"]),
    "unknown activation": ({"activation": "swish-ish"}, ["activation", "swish-ish", "swiglu"]),
    "unknown norm type": ({"norm_type": "batchnorm"}, ["norm_type", "rmsnorm"]),
    "unknown norm position": ({"norm_position": "sandwich"}, ["norm_position", "pre"]),
    "unknown position kind": ({"position_embedding": "xpos"}, ["position_embedding", "rotary"]),
    "hidden dropout of 1": ({"hidden_dropout": 1.0}, ["hidden_dropout"]),
    "negative attention dropout": ({"attention_dropout": -0.1}, ["attention_dropout"]),
    "odd rotary head dim": (
        {"hidden_size": 36, "num_attention_heads": 4, "position_embedding": "rotary"},
        ["rotary", "9"],
    ),
    "a single expert": ({"num_experts": 1}, ["num_experts"]),
    "top-k above experts": ({"num_experts": 2, "num_experts_per_tok": 3}, ["num_experts_per_tok"]),
    "zero kv heads": ({"num_key_value_heads": 0}, ["num_key_value_heads"]),
    "zero layers": ({"num_hidden_layers": 0}, ["num_hidden_layers"]),
    "a unit offset on a LayerNorm": ({"norm_unit_offset": True, "norm_type": "layernorm"}, ["norm_unit_offset"]),
    "an empty sliding window": ({"sliding_window": 0}, ["sliding_window"]),
    "a sliding window over ALiBi": ({"sliding_window": 4, "position_embedding": "alibi"}, ["sliding_window", "alibi"]),
    "a zero logit cap": ({"logit_softcap": 0.0}, ["logit_softcap", "positive"]),
}


@pytest.mark.parametrize("preset", ["bert-tiny", "t5-tiny"])
def test_a_sliding_window_is_a_decoder_switch(preset):
    with pytest.raises(ValueError, match="sliding_window=4 is a decoder switch"):
        hfzoo.preset_config(preset, sliding_window=4)


@pytest.mark.parametrize("preset", ["bert-tiny", "t5-tiny"])
@pytest.mark.parametrize("switch", [{"qk_norm": True}, {"logit_softcap": 30.0}])
def test_qk_norm_and_logit_softcap_are_decoder_switches(preset, switch):
    ((name, value),) = switch.items()
    with pytest.raises(ValueError, match=f"{name}={value!r} is a decoder switch"):
        hfzoo.preset_config(preset, **switch)


@pytest.mark.parametrize("overrides, words", INVALID.values(), ids=INVALID.keys())
def test_invalid_settings_raise_at_config_creation(overrides, words):
    for make in (lambda: ZooDecoderConfig(**overrides), lambda: hfzoo.preset_config("llama-tiny", **overrides)):
        with pytest.raises(ValueError) as error:
            make()
        assert all(word in str(error.value) for word in words), str(error.value)


def test_defaults_are_valid_and_kv_heads_default_to_query_heads():
    config = ZooDecoderConfig(num_attention_heads=8, hidden_size=64)
    assert config.num_key_value_heads == 8
    assert config.head_dim == 8


@pytest.mark.parametrize("kv_heads", [1, 2, 4])
def test_multi_query_grouped_and_multi_head_attention_are_valid(kv_heads):
    assert ZooDecoderConfig(num_attention_heads=4, num_key_value_heads=kv_heads).num_key_value_heads == kv_heads


@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-tiny", "llama-moe-tiny"])
def test_config_round_trips_through_config_json(preset, tmp_path):
    config = hfzoo.preset_config(preset, num_labels=3)
    config.save_pretrained(tmp_path)
    loaded = AutoConfig.from_pretrained(tmp_path)
    assert type(loaded) is ZooDecoderConfig
    assert loaded.to_diff_dict() == config.to_diff_dict()
    assert loaded.num_labels == 3


def test_an_invalid_config_json_fails_on_load(tmp_path):
    hfzoo.preset_config("gpt-tiny").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    values = json.loads(path.read_text())
    values["norm_type"] = "groupnorm"
    path.write_text(json.dumps(values))
    with pytest.raises(ValueError, match="norm_type"):
        AutoConfig.from_pretrained(tmp_path)


# (preset, field, wrong value, expected type as the message names it)
WRONG_TYPES = {
    "string width": ("gpt-tiny", "hidden_size", "128", "int"),
    "bool as a count": ("llama-tiny", "num_hidden_layers", True, "int"),
    "int as a flag": ("gpt-tiny", "attention_bias", 1, "bool"),
    "string rate": ("llama-tiny", "hidden_dropout", "0.1", "float"),
    "string in a token-id list": ("gpt-tiny", "eos_token_id", [2, "3"], "int or list[int] or None"),
    "string optional count": ("llama-tiny", "num_key_value_heads", "2", "int or None"),
    "encoder field": ("bert-tiny", "type_vocab_size", "2", "int"),
    "encoder-decoder field": ("t5-tiny", "num_decoder_layers", 2.0, "int or None"),
}


@pytest.mark.parametrize("preset, field, value, expected", WRONG_TYPES.values(), ids=WRONG_TYPES.keys())
def test_a_wrongly_typed_field_names_the_field_value_and_type(preset, field, value, expected):
    with pytest.raises(TypeError) as error:
        hfzoo.preset_config(preset, **{field: value})
    assert f"{field} must be {expected}" in str(error.value), str(error.value)
    assert repr(value) in str(error.value)


def test_integers_are_valid_floats_and_optional_fields_take_none():
    config = hfzoo.preset_config("llama-tiny", rope_theta=10000, hidden_dropout=0, num_key_value_heads=None)
    assert (config.rope_theta, config.hidden_dropout, config.num_key_value_heads) == (10000, 0, 4)


def test_a_string_in_config_json_fails_on_load_naming_the_field(tmp_path):
    hfzoo.preset_config("gpt-tiny").save_pretrained(tmp_path)
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**json.loads(path.read_text()), "num_attention_heads": "4"}))
    with pytest.raises(TypeError, match=r"num_attention_heads must be int, got '4' \(str\)"):
        AutoConfig.from_pretrained(tmp_path)


def test_position_bias_refuses_kernels_that_would_drop_it():
    """ALiBi and T5 biases reach the kernel as `position_bias`; flash/flex would ignore it silently."""
    import torch
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_config(hfzoo.preset_config("gpt-tiny", position_embedding="alibi"))
    model.config._attn_implementation_internal = "flex_attention"
    with pytest.raises(ValueError, match="position_embedding='alibi'.*'sdpa' or 'eager'"):
        model(torch.ones(1, 3, dtype=torch.long))
