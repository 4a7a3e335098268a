"""PEFT merging (`compose(..., "average", merge=...)`) of classification adapters that save their own head
(`modules_to_save`, as the fine-tuning recipe's adapters do) (issue 17 item 10): the LoRA parts are merged by PEFT's
`add_weighted_adapter`, the heads averaged as outputs."""

import json

import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from safetensors.torch import load_file, save_file
from transformers import AutoModelForSequenceClassification

from hfzoo.adapters import compose

NAMES = ("first", "second")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model, tokenizer_overrides):
    root = tmp_path_factory.mktemp("merge")
    tiny_model("llama-tiny", **tokenizer_overrides).save_pretrained(root / "base")
    folders = {}
    for seed, name in enumerate(NAMES):
        torch.manual_seed(seed)  # a random head and random LoRA factors per adapter
        model = AutoModelForSequenceClassification.from_pretrained(root / "base", num_labels=3)
        config = LoraConfig(r=4, target_modules=["qkv_proj"], init_lora_weights=False, task_type="SEQ_CLS")
        peft_model = get_peft_model(model, config)
        assert peft_model.peft_config["default"].modules_to_save  # PEFT saves the `score` head with it
        peft_model.save_pretrained(root / name)
        folders[name] = root / name
    return root, folders


def _base(root):
    torch.manual_seed(5)
    return AutoModelForSequenceClassification.from_pretrained(root / "base", num_labels=3).eval()


@pytest.mark.parametrize("merge", ["ties", "linear", "cat"])
def test_merging_adapters_with_saved_heads(folders, merge):
    root, adapters = folders
    weights, ids = [0.7, 0.3], torch.randint(3, 200, (2, 7))
    composed = compose(_base(root), adapters, "average", merge=merge, weights=weights, density=0.5, seed=3)
    with torch.no_grad():
        logits = composed(input_ids=ids).logits

    # reference: PEFT's own merge of the LoRA parts (with the heads, PEFT refuses), then the heads' weighted mean
    refused = PeftModel.from_pretrained(_base(root), adapters["first"], adapter_name="first")
    refused.load_adapter(adapters["second"], adapter_name="second")
    with pytest.raises(ValueError, match="modules_to_save"):
        refused.add_weighted_adapter(list(NAMES), weights, "merged", combination_type=merge, density=0.5)
    base, heads = _base(root), []
    lora = get_peft_model(base, LoraConfig(r=4, target_modules=["qkv_proj"]), adapter_name="unused")
    for name in NAMES:
        tensors = load_file(adapters[name] / "adapter_model.safetensors")
        heads.append(tensors.pop("base_model.model.score.weight"))
        config = {**json.loads((adapters[name] / "adapter_config.json").read_text()), "modules_to_save": None}
        lora_only = root / f"{name}-lora-only"
        lora_only.mkdir(exist_ok=True)
        (lora_only / "adapter_config.json").write_text(json.dumps({**config, "task_type": None}))
        save_file(tensors, lora_only / "adapter_model.safetensors")
        lora.load_adapter(lora_only, adapter_name=name)
    torch.manual_seed(3)
    lora.add_weighted_adapter(list(NAMES), weights, "merged", combination_type=merge, density=0.5)
    lora.set_adapter("merged")
    with torch.no_grad():
        base.score.weight.copy_(sum(w * h for w, h in zip(weights, heads)))
        expected = lora(input_ids=ids).logits
    torch.testing.assert_close(logits, expected, atol=1e-5, rtol=1e-5)
