"""Weights must match their config, and load from safetensors only (issue 27 items 3, 4, and the load-side parts of 7
and 8).

Real files: tiny hfzoo and native BERT checkpoints saved to tmp_path, a `config.json` edited to declare more (or fewer)
layers than its weights have, a real `torch.save`d pickle, truncated safetensors files. Loaded as users load them:
the recipes' `load_model` (fine-tuning, composition, `--import_native`), `hfzoo convert` and `finetune --adapter`.
"""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from transformers import (AutoModelForCausalLM, AutoModelForPreTraining, AutoModelForQuestionAnswering,
                          AutoModelForSequenceClassification, AutoModelForTokenClassification, BertConfig,
                          BertForMaskedLM)

import hfzoo
from hfzoo.cli import main as cli
from hfzoo.commands.finetune import main as finetune
from hfzoo.commands.finetune import parse_args
from hfzoo.core.refusals import Refusal
from hfzoo.models.checked_loading import load_checked
from hfzoo.models.checkpoint_files import CheckpointFileError
from hfzoo.tasks import SequenceClassification, load_examples
from hfzoo.training.task_model import load_model


@pytest.fixture(scope="module")
def saved(tmp_path_factory, tokenizer) -> dict[str, Path]:
    """A gpt-tiny causal LM (4 layers) and a native 2-layer BertForMaskedLM, each with the tokenizer."""
    root = tmp_path_factory.mktemp("checkpoints")
    torch.manual_seed(0)
    config = hfzoo.preset_config("gpt-tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(root / "gpt")
    bert = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                      intermediate_size=64, max_position_embeddings=64,
                      pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    BertForMaskedLM(bert).save_pretrained(root / "bert")
    for folder in ("gpt", "bert"):
        tokenizer.save_pretrained(root / folder)
    return {"gpt": root / "gpt", "bert": root / "bert"}


@pytest.fixture
def gpt(saved, tmp_path) -> Path:
    return Path(shutil.copytree(saved["gpt"], tmp_path / "gpt"))


@pytest.fixture
def bert(saved, tmp_path) -> Path:
    return Path(shutil.copytree(saved["bert"], tmp_path / "bert"))


def declare_layers(folder: Path, layers: int) -> None:
    """Edit `config.json` to declare `layers` layers over the weights it was saved with."""
    config = json.loads((folder / "config.json").read_text())
    config["num_hidden_layers"] = layers
    (folder / "config.json").write_text(json.dumps(config))


def truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def recipe_args(model: Path, tmp_path: Path, *extra: str) -> list[str]:
    """Fine-tuning `model` for one step on four labelled rows."""
    data = tmp_path / "data"
    data.mkdir(exist_ok=True)
    for split in ("train", "validation"):
        rows = ["text,label", "a fine film,1", "a dull film,0", "very good,1", "very bad,0"]
        (data / f"{split}.csv").write_text("\n".join(rows) + "\n")
    return ["--model", str(model), "--task", "sequence-classification", "--train_file", str(data / "train.csv"),
            "--validation_file", str(data / "validation.csv"), "--text_column", "text", "--label_column", "label",
            "--max_steps", "1", "--output_dir", str(tmp_path / "run"), *extra]  # fmt: skip


def run_finetune(args: list[str]) -> None:
    try:
        finetune(args)
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)


def recipe_load(model: Path, tmp_path: Path, tokenizer, *extra: str):
    """`load_model` as the fine-tuning and composition recipes call it: (model, family, new keys)."""
    options = parse_args(recipe_args(model, tmp_path, *extra)).data
    task = SequenceClassification(options)
    task.fit_labels(*load_examples(task, options))
    return load_model(options, task, tokenizer)


# ----------------------------------------------------------------------------------------- weights match config
@pytest.mark.parametrize(("layers", "problem"), [(6, "declares 24 weights the file lacks"),
                                                 (2, "holds 24 weights its config does not declare")])
def test_the_recipes_refuse_a_config_that_does_not_match_its_weights(gpt, tmp_path, tokenizer, layers, problem):
    declare_layers(gpt, layers)
    with pytest.raises(CheckpointFileError, match=problem) as error:
        recipe_load(gpt, tmp_path, tokenizer)
    layer = "model.layers.4." if layers == 6 else "model.layers.2."
    assert str(gpt / "model.safetensors") in str(error.value) and layer in str(error.value)


def test_weights_of_another_shape_are_named_with_both_shapes(gpt, tmp_path, tokenizer):
    """transformers refused these after its load-report table, naming no file; the table is no longer printed."""
    config = json.loads((gpt / "config.json").read_text())
    (gpt / "config.json").write_text(json.dumps({**config, "intermediate_size": 256}))
    with pytest.raises(CheckpointFileError, match=r"12 weights have other shapes \(model.layers.0.mlp.down_proj.weight "
                       r"\[128, 512\] where the config makes \[128, 256\]") as error:  # fmt: skip
        recipe_load(gpt, tmp_path, tokenizer)
    assert str(gpt / "model.safetensors") in str(error.value)


def test_fine_tuning_refuses_it_before_writing_anything(gpt, tmp_path):
    declare_layers(gpt, 6)
    with pytest.raises(CheckpointFileError, match="model.layers.4"):
        run_finetune(recipe_args(gpt, tmp_path, "--method", "lora"))
    assert not (tmp_path / "run" / "log.jsonl").exists()


def test_import_native_and_convert_refuse_a_native_config_declaring_more_layers(bert, tmp_path, tokenizer):
    declare_layers(bert, 4)
    with pytest.raises(CheckpointFileError, match=r"lacks: bert\.encoder\.layer\.2\.\* \(16 tensors\), "
                       r"bert\.encoder\.layer\.3\.\* \(16 tensors\)") as error:
        recipe_load(bert, tmp_path, tokenizer, "--import_native", "true")
    assert str(bert / "model.safetensors") in str(error.value)
    with pytest.raises(Refusal, match="declares 32 weights the file lacks"):
        cli(["convert", "from-native", str(bert), str(tmp_path / "out")])
    assert not (tmp_path / "out").exists()


def test_a_new_head_is_named_in_one_line_without_the_load_report(bert, tmp_path, tokenizer, caplog):
    """A masked-LM checkpoint under a classifier: the classifier and BERT's pooler are new (the checkpoint's class
    has neither), its masked-LM head goes unused. Named in one line; transformers' table is not printed."""
    with caplog.at_level(logging.INFO):
        _, _, new = recipe_load(bert, tmp_path, tokenizer)
    assert new == ["bert.pooler.dense.bias", "bert.pooler.dense.weight", "classifier.bias", "classifier.weight"]
    assert not [record for record in caplog.records if "LOAD REPORT" in record.getMessage()]
    lines = [record.getMessage() for record in caplog.records if "new for the task" in record.getMessage()]
    assert len(lines) == 1 and "classifier (2 tensors)" in lines[0] and "not used: cls.predictions" in lines[0]


@pytest.mark.parametrize("head", [AutoModelForTokenClassification, AutoModelForQuestionAnswering])
def test_the_pooler_of_a_next_sentence_checkpoint_is_dropped_under_a_head_without_one(head, tmp_path, caplog):
    """A BERT pretrained with `mlm_nsp` holds a pooler (its class has one); token classification and QA heads have
    none. transformers drops it; hfzoo refused it as "weights its config does not declare"."""
    torch.manual_seed(0)
    AutoModelForPreTraining.from_config(hfzoo.preset_config("bert-tiny", vocab_size=64)).save_pretrained(tmp_path)
    with caplog.at_level(logging.INFO):
        model, new = load_checked(head, tmp_path)
    assert not any("pooler" in key for key in model.state_dict()) and not any("pooler" in key for key in new)
    assert any("not used: " in r.getMessage() and "model.pooler.dense (2 tensors)" in r.getMessage()
               for r in caplog.records)  # fmt: skip


# ----------------------------------------------------------------------------------------- safetensors only
def test_convert_from_native_refuses_a_pickle_without_loading_it(bert, tmp_path):
    weights = BertForMaskedLM.from_pretrained(bert).state_dict()
    (bert / "model.safetensors").unlink()
    torch.save(weights, bert / "pytorch_model.bin")
    with pytest.raises(Refusal, match=r"pytorch_model.bin, a pickle") as error:
        cli(["convert", "from-native", str(bert), str(tmp_path / "out")])
    assert str(bert) in str(error.value) and not (tmp_path / "out").exists()


def test_convert_from_native_names_a_truncated_weights_file(bert, tmp_path):
    truncate(bert / "model.safetensors")
    with pytest.raises(Refusal, match="truncated") as error:
        cli(["convert", "from-native", str(bert), str(tmp_path / "out")])
    assert str(bert / "model.safetensors") in str(error.value)


def trained_adapter(model_folder: Path, folder: Path, **overrides) -> Path:
    """A LoRA with its classifier, saved by PEFT on the model in `model_folder` (a plain PEFT save: no hfzoo base
    record)."""
    model = AutoModelForSequenceClassification.from_pretrained(model_folder, num_labels=2, **overrides)
    lora = LoraConfig(r=2, target_modules=["qkv_proj"], modules_to_save=["score"], init_lora_weights=False)
    get_peft_model(model, lora).save_pretrained(folder)
    return folder


def test_finetune_adapter_refuses_a_pickled_adapter(gpt, tmp_path):
    adapter = trained_adapter(gpt, tmp_path / "adapter")
    torch.save(load_file(adapter / "adapter_model.safetensors"), adapter / "adapter_model.bin")
    (adapter / "adapter_model.safetensors").unlink()
    with pytest.raises(OSError, match=r"adapter_model.bin.*safetensors") as error:
        run_finetune(recipe_args(gpt, tmp_path, "--do_train", "false", "--adapter", str(adapter)))
    assert str(adapter) in str(error.value)


def test_finetune_adapter_names_a_truncated_adapter(gpt, tmp_path):
    adapter = trained_adapter(gpt, tmp_path / "adapter")
    truncate(adapter / "adapter_model.safetensors")
    with pytest.raises(CheckpointFileError, match="truncated") as error:
        run_finetune(recipe_args(gpt, tmp_path, "--do_train", "false", "--adapter", str(adapter)))
    assert str(adapter / "adapter_model.safetensors") in str(error.value)


# ----------------------------------------------------------------------------------------- adapters on their base
@pytest.fixture
def two_layer_gpt(saved, tmp_path) -> Path:
    """gpt-tiny with 2 of its 4 layers, saved as a checkpoint of its own (config and weights agree)."""
    model = AutoModelForCausalLM.from_pretrained(saved["gpt"], num_hidden_layers=2)
    model.save_pretrained(tmp_path / "gpt-2")
    shutil.copy(saved["gpt"] / "tokenizer.json", tmp_path / "gpt-2")
    shutil.copy(saved["gpt"] / "tokenizer_config.json", tmp_path / "gpt-2")
    return tmp_path / "gpt-2"


@pytest.mark.parametrize("deeper", [True, False], ids=["adapter-deeper", "adapter-shallower"])
def test_finetune_adapter_without_a_record_is_checked_by_keys(gpt, two_layer_gpt, tmp_path, deeper):
    """A plain PEFT save whose base folder is gone: PEFT alone drops the extra layers' tensors, or leaves the missing
    ones random; hfzoo refuses, naming the file and the keys."""
    trained_on, evaluated_on = (gpt, two_layer_gpt) if deeper else (two_layer_gpt, gpt)
    adapter = trained_adapter(trained_on, tmp_path / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "moved-away"}))
    what = "the base has no place for" if deeper else "the base needs but the file lacks"
    with pytest.raises(ValueError, match=f"{what}.*layers.2.self_attn.qkv_proj.lora_A") as error:
        run_finetune(recipe_args(evaluated_on, tmp_path, "--do_train", "false", "--adapter", str(adapter)))
    assert str(adapter / "adapter_model.safetensors") in str(error.value)
    assert not (tmp_path / "run" / "metrics.json").exists()


def causal_lm_lora(model_folder: Path, folder: Path) -> Path:
    """A LoRA saved by PEFT on the causal LM in `model_folder`."""
    model = AutoModelForCausalLM.from_pretrained(model_folder)
    get_peft_model(model, LoraConfig(r=2, target_modules=["qkv_proj"], init_lora_weights=False)).save_pretrained(folder)
    return folder


def test_adapter_conversion_refuses_a_base_of_another_depth_before_writing(gpt, two_layer_gpt, tmp_path):
    adapter = causal_lm_lora(gpt, tmp_path / "adapter")
    with pytest.raises(Refusal, match=r"layers.2.self_attn.qkv_proj") as error:
        cli(["convert", "adapter-to-native", str(adapter), str(tmp_path / "out"), "--base", str(two_layer_gpt)])
    assert str(two_layer_gpt) in str(error.value) and not (tmp_path / "out").exists()


def test_adapter_conversion_refuses_a_base_of_another_width_naming_the_shapes(gpt, tmp_path):
    adapter = causal_lm_lora(gpt, tmp_path / "adapter")
    wide = AutoModelForCausalLM.from_config(hfzoo.preset_config("gpt-tiny", hidden_size=64, num_attention_heads=2))
    wide.save_pretrained(tmp_path / "wide")
    with pytest.raises(Refusal, match=r"qkv_proj.lora_A.weight \[2, 128\] where the base needs \[2, 64\]") as error:
        cli(["convert", "adapter-to-native", str(adapter), str(tmp_path / "out"), "--base", str(tmp_path / "wide")])
    assert str(tmp_path / "wide") in str(error.value) and not (tmp_path / "out").exists()


def test_finetune_adapter_of_another_width_is_refused_naming_the_shapes(gpt, tmp_path, tokenizer):
    """Without the check torch's size-mismatch error came from inside PEFT's load, naming no file."""
    adapter = trained_adapter(gpt, tmp_path / "adapter")
    config = json.loads((adapter / "adapter_config.json").read_text())
    (adapter / "adapter_config.json").write_text(json.dumps({**config, "base_model_name_or_path": "moved-away"}))
    wide = hfzoo.preset_config("gpt-tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id,
                               hidden_size=64, num_attention_heads=2)  # fmt: skip
    AutoModelForCausalLM.from_config(wide).save_pretrained(tmp_path / "wide")
    tokenizer.save_pretrained(tmp_path / "wide")
    with pytest.raises(ValueError, match=r"qkv_proj.lora_A.weight \[2, 128\] where the base needs \[2, 64\]") as error:
        run_finetune(recipe_args(tmp_path / "wide", tmp_path, "--do_train", "false", "--adapter", str(adapter)))
    assert str(adapter / "adapter_model.safetensors") in str(error.value)
