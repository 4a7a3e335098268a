"""Broken adapter and composition files are named with what is wrong (issue 17 item 8): a truncated
`adapter_model.safetensors` or `composition.safetensors` (not safetensors' bare SafetensorError), an invalid
`adapter_config.json` or `composition.json` (not a bare JSONDecodeError), a `composition.json` missing a key."""

import json

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from hfzoo.adapters import compose, load_composition, read_adapter
from hfzoo.core.presets import build_preset_model


@pytest.fixture
def saved(tmp_path):
    """A base, a LoRA adapter on it and a soft composition of it (a router to save), all on disk."""
    build_preset_model("gpt-tiny").save_pretrained(tmp_path / "base")
    load = lambda: AutoModelForCausalLM.from_pretrained(tmp_path / "base").eval()  # noqa: E731
    torch.manual_seed(0)
    get_peft_model(load(), LoraConfig(r=4, target_modules=["qkv_proj"])).save_pretrained(tmp_path / "one")
    get_peft_model(load(), LoraConfig(r=2, target_modules=["qkv_proj"])).save_pretrained(tmp_path / "two")
    compose(load(), {"one": tmp_path / "one", "two": tmp_path / "two"}, "soft").save_pretrained(tmp_path / "comp")
    return tmp_path, load


def _truncate(path):
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def test_truncated_adapter_weights_are_named(saved):
    root, _ = saved
    _truncate(root / "one" / "adapter_model.safetensors")
    with pytest.raises(OSError, match=r"one/adapter_model\.safetensors is not a readable safetensors file"):
        read_adapter("one", root / "one")


def test_invalid_adapter_config_is_named(saved):
    root, _ = saved
    (root / "one" / "adapter_config.json").write_text('{"peft_type": "LORA",')
    with pytest.raises(OSError, match=r"one/adapter_config\.json is not valid JSON: .* at line 1"):
        read_adapter("one", root / "one")


def test_truncated_composition_weights_are_named(saved):
    root, load = saved
    _truncate(root / "comp" / "composition.safetensors")
    with pytest.raises(OSError, match=r"comp/composition\.safetensors is not a readable safetensors file"):
        load_composition(load(), root / "comp")


def test_invalid_composition_json_is_named(saved):
    root, load = saved
    spec_file = root / "comp" / "composition.json"
    spec = json.loads(spec_file.read_text())
    spec_file.write_text(spec_file.read_text()[:-5])
    with pytest.raises(OSError, match=r"comp/composition\.json is not valid JSON"):
        load_composition(load(), root / "comp")
    del spec["strategy"]
    spec_file.write_text(json.dumps(spec))
    with pytest.raises(ValueError, match=r"comp/composition\.json: key 'strategy' is missing"):
        load_composition(load(), root / "comp")
    (root / "comp" / "adapters" / "one" / "adapter_model.safetensors").write_bytes(b"")
    spec_file.write_text(json.dumps({**spec, "strategy": "soft"}))
    with pytest.raises(OSError, match=r"adapters/one/adapter_model\.safetensors is not a readable"):
        load_composition(load(), root / "comp")
