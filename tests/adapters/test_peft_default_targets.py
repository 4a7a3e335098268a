"""PEFT's LoRA-like methods find their default target modules on every hfzoo family (issue 17 item 10): LoHa, LoKr,
VeRA and OFT, like LoRA and IA3, need no `target_modules` on hfzoo models."""

import pytest
import torch
from peft import LoHaConfig, LoKrConfig, OFTConfig, VeraConfig, get_peft_model

from hfzoo.core.presets import build_preset_model

# family preset -> the module names the methods adapt there by default
FAMILIES = {
    "gpt-tiny": {"qkv_proj"},
    "bert-tiny": {"qkv_proj"},
    "deberta-tiny": {"qkv_proj"},
    "t5-tiny": {"qkv_proj", "q_proj", "kv_proj"},
}
METHODS = {"loha": LoHaConfig, "lokr": LoKrConfig, "vera": VeraConfig, "oft": OFTConfig}


@pytest.mark.parametrize("method", list(METHODS))
@pytest.mark.parametrize("preset", list(FAMILIES))
def test_get_peft_model_without_target_modules(preset, method):
    model = build_preset_model(preset).eval()
    peft_model = get_peft_model(model, METHODS[method]())
    assert set(peft_model.peft_config["default"].target_modules) == FAMILIES[preset]
    assert 0 < peft_model.get_nb_trainable_parameters()[0]
    ids = torch.randint(3, 100, (2, 6))
    extra = {"decoder_input_ids": ids} if preset == "t5-tiny" else {}
    with torch.no_grad():
        assert torch.isfinite(peft_model(input_ids=ids, **extra).logits).all()
