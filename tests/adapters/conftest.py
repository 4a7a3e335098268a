"""Fixtures of the adapter tests.

Three real PEFT adapters trained here for a few steps on real text (stdlib docstrings of one module each) on
llama-tiny: LoRA "email" (r=4), LoRA "asyncio" (r=8), bottleneck "logging" (Houlsby: o_proj + down_proj, with
LayerNorm). So o_proj carries two LoRA and one bottleneck adapter, qkv_proj two LoRA, down_proj one bottleneck.
Every model is fp32 with dropout 0.
"""

from types import SimpleNamespace

import pytest
import torch
from peft import LoraConfig, get_peft_model
from tests.helpers.llama_adapters import TASKS, train_steps
from transformers import AutoModelForCausalLM

from hfzoo.adapters import BottleneckConfig
from hfzoo.data.default_corpus import load_default_corpus


@pytest.fixture(scope="module")
def setup(tmp_path_factory, tiny_model, tokenizer, tokenizer_overrides):
    """The base folder, the three adapter folders, each task's texts and the tokenizer's batch encoder."""
    root = tmp_path_factory.mktemp("compose")
    tiny_model("llama-tiny", **tokenizer_overrides).save_pretrained(root / "base")
    corpus = load_default_corpus("train")
    modules = corpus["module"]
    texts = {task: corpus.select([i for i, m in enumerate(modules) if m == task][:16])["text"] for task in TASKS}
    encode = lambda batch: dict(tokenizer(batch, padding=True, truncation=True, max_length=32, return_tensors="pt"))
    configs = {
        "email": LoraConfig(r=4, lora_alpha=8, target_modules=["qkv_proj", "o_proj"], task_type="CAUSAL_LM"),
        "asyncio": LoraConfig(
            r=8, lora_alpha=16, alpha_pattern={"o_proj": 32}, target_modules=["qkv_proj", "o_proj"],
            task_type="CAUSAL_LM",
        ),
        "logging": BottleneckConfig(variant="houlsby", reduction_factor=8, layer_norm=True, task_type="CAUSAL_LM"),
    }
    folders = {}
    for task, config in configs.items():
        torch.manual_seed(0)
        model = get_peft_model(AutoModelForCausalLM.from_pretrained(root / "base"), config)
        batch = encode(texts[task][:8])
        train_steps(model, batch, batch["input_ids"].masked_fill(batch["attention_mask"] == 0, -100), steps=4, lr=1e-2)
        folders[task] = root / task
        model.save_pretrained(folders[task])
    return SimpleNamespace(root=root, folders=folders, texts=texts, encode=encode)
