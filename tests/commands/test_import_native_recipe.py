"""The recipes train a native transformers checkpoint as hfzoo's model (`--import_native true`): the checkpoint is
imported on the fly (`hfzoo.convert.import_checkpoint`), keeps its tokenizer, and the run saves an hfzoo checkpoint
or an adapter whose card names the native folder; the adapter, mapped with `adapter_to_native`, gives the same
logits on the native model with plain PEFT. SST-2 rows from ../shared/data; tiny random native BERT and Llama.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
import transformers
from accelerate.state import AcceleratorState, GradientState
from peft import PeftModel
from tests.helpers.paths import SHARED_DATA as DATA
from tests.helpers.tiny_checkpoints import NATIVE
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from hfzoo.commands import compose, finetune
from hfzoo.convert import adapter_to_native, from_native, to_native
from hfzoo.core.recorded_paths import resolve_recorded
from hfzoo.training.task_results import METRICS_FILE

SST2 = ["--task", "sequence-classification", "--dataset", str(DATA / "sst2"), "--text_column", "sentence",
        "--max_train_samples", "24", "--max_eval_samples", "16", "--max_steps", "3", "--per_device_batch_size", "8",
        "--max_length", "48", "--log_every", "1"]  # fmt: skip


def run(recipe, output_dir: Path, *args: str) -> dict:
    """Run a recipe's `main` as a user would; accelerate's process state is reset as a new process would."""
    try:
        recipe.main([*args, "--output_dir", str(output_dir)])
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)
    return json.loads((output_dir / METRICS_FILE).read_text())


def test_full_fine_tuning_of_a_native_bert_saves_an_hfzoo_checkpoint(native_folders, tmp_path):
    out = tmp_path / "full"
    metrics = run(finetune, out, "--model", str(native_folders["bert"]), "--import_native", "true", *SST2)
    assert metrics["imported_from"] == metrics["model"]  # relative to the run folder: no path of the machine
    assert Path(resolve_recorded(metrics["model"], out)).resolve() == native_folders["bert"].resolve()
    saved = json.loads((out / "config.json").read_text())
    assert saved["model_type"] == "hfzoo_encoder" and saved["native_model_type"] == "bert"
    model = AutoModelForSequenceClassification.from_pretrained(out).eval()  # the Auto classes, as any checkpoint
    assert type(model).__name__ == "ZooEncoderForSequenceClassification"
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "| imported from |" in card and "hfzoo.convert.from_native" in card
    # The native tokenizer came along, and the trained model exports back to BertForSequenceClassification.
    assert AutoTokenizer.from_pretrained(out).vocab == AutoTokenizer.from_pretrained(native_folders["bert"]).vocab
    native = to_native(model, tmp_path / "exported")
    batch = AutoTokenizer.from_pretrained(out)(["a gripping , funny film"], return_tensors="pt")
    with torch.no_grad():
        assert (native(**batch).logits - model(**batch).logits).abs().max() <= 1e-4


@pytest.mark.parametrize("family", list(NATIVE))
def test_a_lora_trained_on_the_imported_model_gives_equal_logits_on_the_native_model(family, native_folders, tmp_path):
    folder, out = native_folders[family], tmp_path / "lora"
    metrics = run(finetune, out, "--model", str(folder), "--import_native", "true", "--method", "lora", *SST2)
    assert metrics["method"] == "lora" and Path(resolve_recorded(metrics["imported_from"], out)) == folder.resolve()
    card = (out / "README.md").read_text(encoding="utf-8")
    assert "from_native(AutoModelForSequenceClassification.from_pretrained(" in card  # how to rebuild the base

    # The base as the card rebuilds it: the native model with the task's head, imported; then each side's adapter.
    kwargs = dict(metrics["model_kwargs"])
    if "id2label" in kwargs:  # JSON keys are strings
        kwargs["id2label"] = {int(key): label for key, label in kwargs["id2label"].items()}
    native = AutoModelForSequenceClassification.from_pretrained(folder, **kwargs).eval()
    zoo = PeftModel.from_pretrained(from_native(native), out).eval()
    mapped = adapter_to_native(out, tmp_path / "native-lora", native)
    recorded = json.loads((mapped / "adapter_config.json").read_text())["base_model_name_or_path"]
    assert recorded.startswith("../") and Path(resolve_recorded(recorded, mapped)) == folder  # relative to the adapter
    adapted = PeftModel.from_pretrained(native, mapped).eval()  # plain PEFT on transformers' own class
    tokenizer = AutoTokenizer.from_pretrained(out)
    batch = tokenizer(["a gripping , funny film", "dull and far too long"], padding=True, return_tensors="pt")
    with torch.no_grad():
        difference = (adapted(**batch).logits - zoo(**batch).logits).abs().max().item()
    print(f"{family}: recipe LoRA on the imported model vs mapped on native, max abs diff {difference:.2e}")
    assert difference <= 1e-4
    predictions = [json.loads(line)["prediction"] for line in (out / "predictions.jsonl").read_text().splitlines()]
    assert len(predictions) == 16 and set(predictions) <= {"0", "1"}


def test_compose_takes_import_native_too(native_folders, tmp_path):
    folder = native_folders["bert"]
    run(finetune, tmp_path / "lora", "--model", str(folder), "--import_native", "true", "--method", "lora", *SST2)
    adapters = ["--adapters", f"sst2={tmp_path / 'lora'}", "--strategy", "average", "--baseline", "false"]
    metrics = run(compose, tmp_path / "composed", "--model", str(folder), "--import_native", "true", *SST2, *adapters)
    assert Path(resolve_recorded(metrics["imported_from"], tmp_path / "composed")) == folder.resolve()
    assert metrics["reload_check"] == {"parameters_equal": True, "predictions_equal": True}
    assert "from_native(" in (tmp_path / "composed" / "README.md").read_text(encoding="utf-8")


def test_an_unsupported_native_type_is_refused_naming_it_and_the_supported_ones(native_folders, tmp_path):
    folder = tmp_path / "xlnet"
    config = transformers.XLNetConfig(vocab_size=64, d_model=32, n_layer=1, n_head=2, d_inner=48)
    transformers.XLNetLMHeadModel(config).save_pretrained(folder)
    for name in ("vocab.txt", "tokenizer.json", "tokenizer_config.json"):
        if (native_folders["bert"] / name).is_file():
            shutil.copy(native_folders["bert"] / name, folder / name)
    refusal = r"'xlnet' model, which hfzoo.convert cannot import: it converts gpt2, .*electra.*distilbert"
    with pytest.raises(ValueError, match=refusal):
        run(finetune, tmp_path / "out", "--model", str(folder), "--import_native", "true", *SST2)
    assert not (tmp_path / "out" / "log.jsonl").exists()
