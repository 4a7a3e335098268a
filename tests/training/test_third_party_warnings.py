"""Third-party warnings a user cannot act on are not printed by hfzoo's fine-tunes: silenced at their cause (the
argument the library wants) or, where PEFT gives no such argument, ignored by category and message around the call
that raises them (hfzoo.adapters.peft_warnings)."""

import warnings

import torch
from peft import LoraConfig, PeftModel
from transformers import AutoModelForSequenceClassification, GPT2Config, GPT2ForSequenceClassification

import hfzoo
from hfzoo.adapters.methods import apply_method
from hfzoo.commands import finetune

SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=64)


def test_attaching_and_loading_adapters_prints_no_deprecation_warning(tmp_path):
    """PEFT reads an attribute transformers deprecates (a FutureWarning on every adapter): not shown to users."""
    torch.manual_seed(0)
    config = hfzoo.preset_config("gpt-tiny", num_labels=2, pad_token_id=0, **SMALL)
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        adapted = apply_method(AutoModelForSequenceClassification.from_config(config),
                               LoraConfig(task_type="SEQ_CLS", target_modules=["qkv_proj"], r=2))  # fmt: skip
        adapted.save_pretrained(tmp_path / "adapter")
        evaluation = finetune.parse_args(["--model", "unused", "--task", "sequence-classification", "--dataset",
                                          "unused", "--do_train", "false", "--adapter", str(tmp_path / "adapter")])
        loaded, method = finetune.load_trained(AutoModelForSequenceClassification.from_config(config), [],
                                               evaluation.data.model, evaluation.adapter)
    assert isinstance(loaded, PeftModel) and method == "lora"
    deprecations = [w for w in caught_warnings if issubclass(w.category, (FutureWarning, DeprecationWarning))]
    assert not deprecations, [str(w.message) for w in deprecations]


def test_lora_on_native_gpt2_is_told_its_weight_layout():
    """GPT-2's Conv1D stores weights [in, out]: PEFT warned on every such fine-tune before setting fan_in_fan_out."""
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=64, n_embd=32, n_layer=1, n_head=2, n_positions=32, num_labels=2, pad_token_id=0)
    with warnings.catch_warnings(record=True) as caught_warnings:
        warnings.simplefilter("always")
        adapted = apply_method(GPT2ForSequenceClassification(config), LoraConfig(task_type="SEQ_CLS", r=2))
    assert adapted.peft_config["default"].fan_in_fan_out
    assert not caught_warnings, [str(w.message) for w in caught_warnings]
