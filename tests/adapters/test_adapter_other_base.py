"""An adapter is refused on another base of the same model type and sizes (issue 37 item 7): `hfzoo_base.json`
recorded a hash of the base's `config.json` and its path, but only the type and sizes were compared, so `hfzoo
generate` and `hfzoo convert adapter-to-native` took an adapter onto another seed's weights or another dropout.
The record now holds a hash of the base's safetensors files too, and both are compared; `--allow_other_base` uses
the base anyway, saying so. A record written before (no weights hash) keeps the type and size checks alone."""

import hashlib
import json
import logging
import shutil

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from hfzoo.adapters.composition.task_adapter import BASE_RECORD, save_base_identity
from hfzoo.cli import main
from hfzoo.core.refusals import Refusal

PROMPT = ["--prompt", "Return a new list", "--max_new_tokens", "2"]


@pytest.fixture(scope="module")
def bases(tmp_path_factory, tiny_model, tokenizer, tokenizer_overrides):
    """gpt-tiny bases (the adapter's, a copy of it elsewhere, another seed's, the same weights with another dropout)
    and a LoRA saved on the first with its record, as `hfzoo finetune` writes it."""
    root = tmp_path_factory.mktemp("other-base")
    for name, seed, dropout in (("base", 0, 0.0), ("other-seed", 1, 0.0), ("other-dropout", 0, 0.1)):
        tiny_model("gpt-tiny", seed=seed, attention_dropout=dropout, **tokenizer_overrides).save_pretrained(root / name)
        tokenizer.save_pretrained(root / name)
    shutil.copytree(root / "base", root / "copy")
    base = AutoModelForCausalLM.from_pretrained(root / "base")
    torch.manual_seed(0)
    lora = LoraConfig(r=4, target_modules=["qkv_proj"], init_lora_weights=False, task_type="CAUSAL_LM")
    get_peft_model(base, lora).save_pretrained(root / "adapter")
    save_base_identity(root / "adapter", base)
    return root


def test_the_record_holds_the_hash_of_the_base_weights(bases):
    record = json.loads((bases / "adapter" / BASE_RECORD).read_text())
    assert record["weights_sha256"] == hashlib.sha256((bases / "base" / "model.safetensors").read_bytes()).hexdigest()


@pytest.mark.parametrize(("base", "differs"), [("other-seed", "weights"), ("other-dropout", "config.json")])
def test_generate_refuses_another_base_of_the_same_shape_unless_allowed(bases, base, differs, caplog, capsys):
    adapter = ["--adapter", f"a={bases / 'adapter'}"]
    with pytest.raises(Refusal, match=rf"the base model {bases / base} is not the one adapter 'a' .* trained on") as no:
        main(["generate", str(bases / base), *adapter, *PROMPT])
    assert f"its {differs} differ from the recorded ones" in str(no.value) and "--allow_other_base" in str(no.value)
    with caplog.at_level(logging.WARNING):
        main(["generate", str(bases / base), *adapter, *PROMPT, "--allow_other_base"])
    assert "used anyway (--allow_other_base)" in caplog.text
    main(["generate", str(bases / "copy"), *adapter, *PROMPT])  # the same files elsewhere are the same base
    assert capsys.readouterr().out.startswith("[a] Return a new list")


def test_a_record_without_the_weights_hash_keeps_the_type_and_size_checks(bases, tmp_path):
    shutil.copytree(bases / "adapter", tmp_path / "old")
    record = json.loads((tmp_path / "old" / BASE_RECORD).read_text())
    del record["weights_sha256"]
    (tmp_path / "old" / BASE_RECORD).write_text(json.dumps(record))
    main(["generate", str(bases / "other-seed"), "--adapter", f"a={tmp_path / 'old'}", *PROMPT])


def test_convert_adapter_to_native_refuses_another_base_of_the_same_shape(bases, tmp_path):
    convert = ["convert", "adapter-to-native", str(bases / "adapter")]
    with pytest.raises(Refusal, match=r"its weights differ from the recorded ones"):
        main([*convert, str(tmp_path / "refused"), "--base", str(bases / "other-seed")])
    assert not (tmp_path / "refused").exists()
    main([*convert, str(tmp_path / "allowed"), "--base", str(bases / "other-seed"), "--allow_other_base"])
    assert (tmp_path / "allowed" / "adapter_model.safetensors").is_file()
    # The native side has other files by construction: its hashes are not compared.
    main(["convert", "to-native", str(bases / "base"), str(tmp_path / "native")])
    main([*convert, str(tmp_path / "on-native"), "--base", str(tmp_path / "native")])
    assert (tmp_path / "on-native" / "adapter_model.safetensors").is_file()
