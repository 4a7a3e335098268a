"""Adapters refuse a base they were not trained on (issue 17 item 7). The families share module names, so a gpt-tiny
LoRA's tensors fit a bert-tiny; hfzoo saves the base's identity beside PEFT's files (`hfzoo_base.json`) and
`compose`/`load_composition` check it, naming both bases. Layer-count mismatches are refused without the record."""

import json
import os
from pathlib import Path

import pytest
import torch
from peft import LoraConfig, get_peft_model

from hfzoo.adapters import compose, load_composition
from hfzoo.adapters.composition.task_adapter import BASE_RECORD, save_base_identity
from hfzoo.core.presets import build_preset_model
from hfzoo.core.recorded_paths import resolve_recorded

LORA = dict(r=4, target_modules=["qkv_proj"], init_lora_weights=False)


def _save_adapter(model, folder, record: bool):
    torch.manual_seed(0)
    get_peft_model(model, LoraConfig(**LORA)).save_pretrained(folder)
    if record:
        save_base_identity(folder, model)
    return folder


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    root = tmp_path_factory.mktemp("bases")
    for preset, overrides in {"gpt-tiny": {}, "bert-tiny": {}, "gpt-2layer": {"num_hidden_layers": 2}}.items():
        model = build_preset_model(preset.replace("2layer", "tiny"), **overrides)
        model.save_pretrained(root / preset)
    return root


def _load(bases, name):
    from transformers import AutoModelForCausalLM, AutoModelForMaskedLM

    auto = AutoModelForMaskedLM if name.startswith("bert") else AutoModelForCausalLM
    return auto.from_pretrained(bases / name).eval()


def test_the_record_names_the_base(bases, tmp_path):
    folder = _save_adapter(_load(bases, "gpt-tiny"), tmp_path / "gpt", record=True)
    record = json.loads((folder / BASE_RECORD).read_text())
    assert record["model_type"] == "hfzoo_decoder" and record["num_hidden_layers"] == 4
    assert not os.path.isabs(record["base_model"])  # no path of the machine; relative to the adapter folder
    assert Path(resolve_recorded(record["base_model"], folder)) == bases / "gpt-tiny"
    assert len(record["config_sha256"]) == 64


def test_a_gpt_adapter_is_refused_on_a_bert_base_naming_both(bases, tmp_path):
    gpt = _save_adapter(_load(bases, "gpt-tiny"), tmp_path / "gpt", record=True)
    bert = _save_adapter(_load(bases, "bert-tiny"), tmp_path / "bert", record=True)
    with pytest.raises(ValueError, match=r"trained on hfzoo_decoder .*gpt-tiny.*base model is hfzoo_encoder"):
        compose(_load(bases, "bert-tiny"), {"gpt": gpt}, "average")
    with pytest.raises(ValueError, match=r"adapter 'gpt'.*differs in model_type"):
        compose(_load(bases, "bert-tiny"), {"bert": bert, "gpt": gpt}, "fixed")
    compose(_load(bases, "bert-tiny"), {"bert": bert}, "average")  # its own base is fine


def test_a_composition_with_a_foreign_adapter_is_refused_on_load(bases, tmp_path):
    gpt = _save_adapter(_load(bases, "gpt-tiny"), tmp_path / "gpt", record=True)
    composed = compose(_load(bases, "gpt-tiny"), {"gpt": gpt}, "average")
    composed.save_pretrained(tmp_path / "composition")
    assert (tmp_path / "composition" / "adapters" / "gpt" / BASE_RECORD).is_file()
    load_composition(_load(bases, "gpt-tiny"), tmp_path / "composition")
    with pytest.raises(ValueError, match="differs"):
        load_composition(_load(bases, "bert-tiny"), tmp_path / "composition")


@pytest.mark.parametrize("record", [True, False])
def test_layer_mismatches_are_refused_with_or_without_the_record(bases, tmp_path, record):
    four = _save_adapter(_load(bases, "gpt-tiny"), tmp_path / "four", record=record)
    two = _save_adapter(_load(bases, "gpt-2layer"), tmp_path / "two", record=record)
    with pytest.raises(ValueError, match="num_hidden_layers|does not have"):
        compose(_load(bases, "gpt-2layer"), {"four": four}, "average")
    with pytest.raises(ValueError, match="num_hidden_layers|adapts 2 modules"):
        compose(_load(bases, "gpt-tiny"), {"two": two}, "average")


def test_without_the_record_the_base_peft_names_is_read(bases, tmp_path):
    """A plain PEFT adapter (no hfzoo_base.json) whose `base_model_name_or_path` still exists: its config.json is
    the record."""
    gpt = _save_adapter(_load(bases, "gpt-tiny"), tmp_path / "gpt", record=False)
    assert not (gpt / BASE_RECORD).exists()
    with pytest.raises(ValueError, match=r"trained on hfzoo_decoder .*base model is hfzoo_encoder"):
        compose(_load(bases, "bert-tiny"), {"gpt": gpt}, "average")
