"""The preset API: names users type, overrides, helpful errors, and the parameter budgets each size promises."""

import pytest
import torch
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.core.presets import preset_family

DECODER_PRESET_NAMES = {
    "gpt-tiny", "gpt-small", "gpt-base", "llama-tiny", "llama-small", "llama-base", "llama-moe-tiny", "llama-moe-small",
    "gpt-speedrun-tiny", "gpt-speedrun-small",
}
GPT2_PARAMETERS = 124_439_808  # GPT-2 "124M" with its tied 50257-token embedding.


def decoder_presets_of_size(size: str) -> list[str]:
    """Every decoder preset named `*-<size>`, so a preset added later is held to the same budget."""
    return [name for name in hfzoo.list_presets() if name.endswith(f"-{size}") and preset_family(name) == "decoder"]


def parameter_count(preset: str) -> int:
    """Parameters of the causal LM of `preset`, counted on the meta device (no memory, no init)."""
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(hfzoo.preset_config(preset))
    return sum(parameter.numel() for parameter in model.parameters())


def test_list_presets_has_the_decoder_presets():
    presets = hfzoo.list_presets()
    assert DECODER_PRESET_NAMES <= set(presets)
    assert presets == sorted(presets)


@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-tiny"])
def test_preset_config_applies_overrides(preset):
    config = hfzoo.preset_config(preset, num_hidden_layers=2, hidden_size=64, num_labels=3)
    assert isinstance(config, hfzoo.ZooDecoderConfig)
    assert (config.num_hidden_layers, config.hidden_size, config.num_labels) == (2, 64, 3)
    # Values the override did not touch come from the preset.
    assert config.num_attention_heads == hfzoo.preset_config(preset).num_attention_heads


def test_preset_configs_are_independent_objects():
    first = hfzoo.preset_config("gpt-tiny")
    first.hidden_size = 8
    assert hfzoo.preset_config("gpt-tiny").hidden_size == 128


def test_unknown_preset_lists_the_valid_ones():
    with pytest.raises(ValueError, match="gpt-tyni") as error:
        hfzoo.preset_config("gpt-tyni")
    assert all(name in str(error.value) for name in hfzoo.list_presets())


def test_unknown_override_lists_the_valid_keys():
    with pytest.raises(ValueError, match="hiden_size") as error:
        hfzoo.preset_config("llama-tiny", hiden_size=64)
    message = str(error.value)
    assert "hidden_size" in message and "num_key_value_heads" in message and "position_embedding" in message


@pytest.mark.parametrize("preset", decoder_presets_of_size("tiny"))
def test_tiny_presets_stay_under_two_million_parameters(preset):
    assert parameter_count(preset) < 2_000_000


@pytest.mark.parametrize("preset", decoder_presets_of_size("small"))
def test_small_presets_are_ten_to_thirty_million_parameters(preset):
    assert 10_000_000 <= parameter_count(preset) <= 30_000_000


def test_gpt_base_matches_gpt2_124m():
    assert abs(parameter_count("gpt-base") - GPT2_PARAMETERS) / GPT2_PARAMETERS < 0.01
