"""The fine-tuning recipe end to end, as users run it (`hfzoo.commands.finetune.main`, what `hfzoo finetune` calls):
the four tasks on small samples of the real data sets, on hfzoo checkpoints (from test_finetune_formatting.py) and
on native transformers ones; adapters reloaded with plain PEFT reproduce the recipe's predictions.
"""

from __future__ import annotations

import copy
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from huggingface_hub import ModelCard
from peft import PeftModel
from safetensors.torch import load_file
from tests.helpers.paths import REPO, SHARED_DATA as DATA
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    AutoTokenizer,
    BertConfig,
    BertForSequenceClassification,
    GPT2Config,
    GPT2ForSequenceClassification,
    PreTrainedTokenizerFast,
)

from hfzoo.commands.finetune import main
from hfzoo.core.recorded_paths import resolve_recorded
from hfzoo.training.logging import read_log
from hfzoo.training.task_results import METRICS_FILE, PREDICTIONS_FILE

QUICK = ["--max_train_samples", "64", "--max_eval_samples", "32", "--max_steps", "8", "--per_device_batch_size", "8",
         "--log_every", "1"]  # fmt: skip
SST2 = ["--task", "sequence-classification", "--dataset", str(DATA / "sst2"), "--text_column", "sentence"]
CONLL = ["--task", "token-classification", "--dataset", str(DATA / "conll2003")]
CLASSIFICATION_KEYS = {"accuracy", "f1", "matthews_correlation"}
PARAMETER_KEYS = {"trainable_parameters", "total_parameters", "trainable_fraction"}


def finetune(output_dir: Path, *args: str) -> tuple[dict, list[dict]]:
    """Run the recipe; (metrics.json, predictions.jsonl). accelerate's process state is reset as a new process would."""
    try:
        main([*QUICK, *args, "--output_dir", str(output_dir)])
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)
    predictions = [json.loads(line) for line in (output_dir / PREDICTIONS_FILE).read_text(encoding="utf-8").splitlines()]
    return json.loads((output_dir / METRICS_FILE).read_text()), predictions


def reload_adapter(output_dir: Path, auto_class, seed: int) -> PeftModel:
    """The adapter as a user reloads it with plain PEFT: base with the same head shape (the card's recipe), then
    `PeftModel.from_pretrained`. `seed` draws the base's fresh head: the adapter must overwrite it."""
    summary = json.loads((output_dir / METRICS_FILE).read_text())
    kwargs = copy.deepcopy(summary["model_kwargs"])
    if "id2label" in kwargs:
        kwargs["id2label"] = {int(k): v for k, v in kwargs["id2label"].items()}
    torch.manual_seed(seed)
    base = auto_class.from_pretrained(resolve_recorded(summary["model"], output_dir), **kwargs)  # relative to the run
    return PeftModel.from_pretrained(base, output_dir).eval()


def assert_run_outputs(output_dir: Path, metrics: dict, metric_keys: set, adapter: bool) -> None:
    assert metric_keys | PARAMETER_KEYS <= metrics.keys()
    assert (output_dir / "adapter_model.safetensors").is_file() == adapter
    assert (output_dir / "model.safetensors").is_file() == (not adapter)
    card = (output_dir / "README.md").read_text(encoding="utf-8")
    assert f"| trainable parameters | {metrics['trainable_parameters']:,} |" in card
    assert all(f"type: {key}" in card for key in metric_keys)  # model-index results
    # The Hub's reading of the card: the library that loads this folder; the local base and data are no Hub ids.
    hub = ModelCard.load(output_dir / "README.md").data
    assert hub.library_name == ("peft" if adapter else "transformers") and hub.pipeline_tag == metrics["pipeline_tag"]
    assert hub.base_model is None and hub.datasets is None
    assert [r["event"] for r in read_log(output_dir)][-2:] == ["eval", "end"]


# ------------------------------------------------------------------------------------------ the four tasks
def test_sequence_classification_decoder_lora_reloads_to_the_same_predictions(checkpoints, tmp_path):
    out = tmp_path / "sst2-lora"
    metrics, predictions = finetune(out, "--model", str(checkpoints["gpt-tiny"]), *SST2, "--method", "lora")
    assert_run_outputs(out, metrics, CLASSIFICATION_KEYS, adapter=True)
    # Rank 8 on every linear layer of a 64-wide model: 6% (of a 384-wide MiniLM: 1.3%).
    assert 0 < metrics["trainable_fraction"] < 0.1 and metrics["eval_examples"] == len(predictions) == 32
    adapted = json.loads((out / "adapter_config.json").read_text())["target_modules"]
    assert {name.rsplit(".", 1)[-1] for name in adapted} >= {"qkv_proj", "o_proj", "up_proj", "down_proj"}  # all-linear
    correct = sum(p["prediction"] == p["label"] for p in predictions)
    assert metrics["accuracy"] == correct / 32
    assert "base_model.model.score.weight" in load_file(out / "adapter_model.safetensors")  # the head, saved

    tokenizer = AutoTokenizer.from_pretrained(out)
    texts = [p["text"] for p in predictions]
    ids = [[tokenizer.bos_token_id, *tokenizer(t, add_special_tokens=False)["input_ids"], tokenizer.eos_token_id]
           for t in texts]  # fmt: skip
    logits = []
    for seed in (0, 1):
        model = reload_adapter(out, AutoModelForSequenceClassification, seed)
        with torch.no_grad():
            logits.append(torch.cat([model(input_ids=torch.tensor([row])).logits for row in ids]))
    torch.testing.assert_close(logits[0], logits[1], rtol=0, atol=0)  # the head came from the adapter, not the seed
    labels = model.base_model.model.config.id2label
    assert [labels[i] for i in logits[0].argmax(-1).tolist()] == [p["prediction"] for p in predictions]


def test_muon_trains_the_lora_matrices_and_the_task_head(checkpoints, tmp_path):
    """Every trainable parameter is a matrix here (no biases, no embeddings): Muon alone trains them."""
    out = tmp_path / "sst2-lora-muon"
    args = ["--model", str(checkpoints["gpt-tiny"]), *SST2, "--method", "lora", "--optimizer", "muon"]
    metrics, predictions = finetune(out, *args)
    assert_run_outputs(out, metrics, CLASSIFICATION_KEYS, adapter=True)
    losses = [r["loss"] for r in read_log(out) if r["event"] == "train"]
    assert len(losses) == 8 and all(math.isfinite(loss) for loss in losses)


def test_token_classification_encoder_bottleneck_reloads_to_the_same_predictions(checkpoints, tmp_path):
    out = tmp_path / "conll-bottleneck"
    metrics, predictions = finetune(out, "--model", str(checkpoints["bert-tiny"]), *CONLL, "--method", "bottleneck",
                                    "--learning_rate", "1e-2")  # fmt: skip
    assert_run_outputs(out, metrics, {"precision", "recall", "f1", "accuracy"}, adapter=True)
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "BOTTLENECK" and "classifier" in config["modules_to_save"]

    tokenizer = AutoTokenizer.from_pretrained(out)
    for seed in (0, 1):
        model = reload_adapter(out, AutoModelForTokenClassification, seed)
        labels = model.base_model.model.config.id2label
        for record in predictions:
            encoding = tokenizer(record["tokens"], is_split_into_words=True, truncation=True, max_length=128,
                                 return_tensors="pt")  # fmt: skip
            with torch.no_grad():
                tokens = model(**encoding).logits.argmax(-1)[0].tolist()
            word_ids = encoding.word_ids()
            firsts = [i for i, w in enumerate(word_ids) if w is not None and (i == 0 or word_ids[i - 1] != w)]
            assert [labels[tokens[i]] for i in firsts] == record["predictions"]


def test_question_answering_encoder_full_finetuning(checkpoints, tmp_path):
    out = tmp_path / "squad"
    metrics, predictions = finetune(
        out, "--model", str(checkpoints["bert-tiny"]), "--task", "question-answering",
        "--train_file", str(DATA / "squad" / "dev-v1.1.json"), "--validation_split", "0.05",
        "--max_length", "128", "--doc_stride", "32", "--learning_rate", "1e-3",
    )  # fmt: skip
    assert_run_outputs(out, metrics, {"exact_match", "f1"}, adapter=False)
    assert metrics["trainable_fraction"] == 1.0 and len(predictions) == 32
    questions = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))["data"]
    held_out = {qa["id"] for article in questions[-3:] for p in article["paragraphs"] for qa in p["qas"]}
    assert {p["id"] for p in predictions} <= held_out  # validation comes from the last articles only
    assert all(p["prediction_text"] == "" or len(p["prediction_text"]) < 400 for p in predictions)
    model = AutoModelForQuestionAnswering.from_pretrained(out)
    assert type(model).__name__ == "ZooEncoderForQuestionAnswering"


def test_seq2seq_encoder_decoder_generates_and_scores_bleu(checkpoints, tmp_path):
    out = tmp_path / "multi30k"
    metrics, predictions = finetune(
        out, "--model", str(checkpoints["t5-tiny"]), "--task", "seq2seq", "--dataset", str(DATA / "multi30k"),
        "--text_column", "en", "--target_column", "de", "--task_prefix", "translate English to German:",
        "--max_target_length", "12", "--learning_rate", "1e-3", "--num_beams", "2",
    )  # fmt: skip
    assert_run_outputs(out, metrics, {"bleu"}, adapter=False)
    assert 0.0 <= metrics["bleu"] <= 100.0 and len(predictions) == 32
    assert predictions[0]["source"] == "A group of men are loading cotton onto a truck"
    assert all(isinstance(p["prediction"], str) for p in predictions)


# ------------------------------------------------------------------------------------------ formulations, methods
def test_text_to_text_classification_with_lora(checkpoints, tmp_path):
    out = tmp_path / "sst2-t5"
    metrics, predictions = finetune(out, "--model", str(checkpoints["t5-tiny"]), *SST2, "--task_prefix", "sst2",
                                    "--label_words", "{0: negative, 1: positive}", "--method", "lora")  # fmt: skip
    assert_run_outputs(out, metrics, CLASSIFICATION_KEYS, adapter=True)
    assert metrics["auto_class"] == "AutoModelForSeq2SeqLM" and all("generated" in p for p in predictions)
    valid = [p for p in predictions if p["prediction"] is not None]
    assert metrics["accuracy"] == sum(p["prediction"] == p["label"] for p in valid) / 32


def test_decoder_seq2seq_with_prefix_tuning(checkpoints, tmp_path):
    out = tmp_path / "multi30k-prefix"
    metrics, predictions = finetune(
        out, "--model", str(checkpoints["gpt-tiny"]), "--task", "seq2seq", "--dataset", str(DATA / "multi30k"),
        "--text_column", "en", "--target_column", "de", "--max_target_length", "8", "--method", "prefix",
    )  # fmt: skip
    assert_run_outputs(out, metrics, {"bleu"}, adapter=True)
    assert json.loads((out / "adapter_config.json").read_text())["peft_type"] == "PREFIX_TUNING"


def test_full_finetuning_memorises_a_small_training_set(checkpoints, tmp_path):
    """Evaluated on its own 16 training rows after 30 epochs, the model has learned them: the loop really trains."""
    out, train = tmp_path / "sst2-full", str(DATA / "sst2" / "train.tsv")
    metrics, _ = finetune(
        out, "--model", str(checkpoints["bert-tiny"]), "--task", "sequence-classification", "--train_file", train,
        "--validation_file", train, "--text_column", "sentence", "--max_train_samples", "16",
        "--max_eval_samples", "16", "--max_steps", "60", "--learning_rate", "1e-3", "--warmup_ratio", "0",
    )  # fmt: skip
    losses = [r["loss"] for r in read_log(out) if r["event"] == "train"]
    assert len(losses) == 60 and sum(losses[-8:]) < 0.25 * sum(losses[:8])
    assert metrics["accuracy"] == 1.0


def test_from_scratch_keeps_the_architecture_and_none_of_the_weights(checkpoints, tmp_path):
    """The "does pretraining help?" baseline: same architecture, tokenizer and head, weights drawn afresh."""
    out = tmp_path / "sst2-scratch"
    metrics, _ = finetune(out, "--model", str(checkpoints["bert-tiny"]), *SST2, "--from_scratch", "true",
                          "--max_steps", "1", "--learning_rate", "1e-12")  # fmt: skip
    pretrained = load_file(checkpoints["bert-tiny"] / "model.safetensors")
    trained = load_file(out / "model.safetensors")
    shared = [key for key in trained if key in pretrained]
    assert shared and metrics["trainable_fraction"] == 1.0
    assert all(trained[key].shape == pretrained[key].shape for key in shared)
    drawn = [key for key in shared if "norm" not in key and "bias" not in key]  # not constants at init
    assert drawn and not any(torch.allclose(trained[key], pretrained[key]) for key in drawn)
    with pytest.raises(SystemExit, match="from_scratch.*--method full"):
        finetune(tmp_path / "x", "--model", str(checkpoints["bert-tiny"]), *SST2, "--from_scratch", "true",
                 "--method", "lora")  # fmt: skip


def test_config_overrides_reach_the_trained_model_and_bad_ones_are_refused_before_training(checkpoints, tmp_path):
    """A checkpoint pretrained without dropout fine-tunes with it: the override is in the model that trains (its
    dropout layers) and in the config saved with it; with an adapter too, as dropout is all an adapter may change. A
    misspelt key, an invalid value, a key the run sets, or (with an adapter) a key that would change what its base
    computes stops the run at once."""
    out, model = tmp_path / "dropout", str(checkpoints["bert-tiny"])
    finetune(out, "--model", model, *SST2, "--max_steps", "1",
             "--config_overrides", "{hidden_dropout: 0.3, classifier_dropout: 0.2}")  # fmt: skip
    saved = json.loads((out / "config.json").read_text())
    assert (saved["hidden_dropout"], saved["classifier_dropout"]) == (0.3, 0.2)
    dropouts = {m.p for m in AutoModelForSequenceClassification.from_pretrained(out).modules()
                if isinstance(m, torch.nn.Dropout)}  # fmt: skip
    assert dropouts == {0.3, 0.2}
    lora = ("--method", "lora")
    metrics, _ = finetune(tmp_path / "lora", "--model", model, *SST2, "--max_steps", "1", *lora,
                          "--config_overrides", "{hidden_dropout: 0.3}")  # fmt: skip
    assert metrics["method"] == "lora" and (tmp_path / "lora" / "adapter_model.safetensors").is_file()
    refused = {
        ("{hidden_dropout_prob: 0.1}",): r"no 'hidden_dropout_prob'\. Did you mean 'hidden_dropout'\?",
        ("{hidden_dropout: 1.5}",): r"hidden_dropout must be in \[0, 1\), got 1\.5",
        ("{num_labels: 5}",): r"'num_labels' is set by the run",
        ("{classifier_pooling: mean, hidden_dropout: 0.2}", *lora): r"classifier_pooling would change what the base",
    }
    for (overrides, *method), message in refused.items():
        with pytest.raises((ValueError, SystemExit), match=message):  # SystemExit: refused by the config's check
            finetune(tmp_path / "refused", "--model", model, *SST2, "--config_overrides", overrides, *method)
        assert not (tmp_path / "refused" / "log.jsonl").exists()


def test_adalora_from_a_peft_config_file(checkpoints, tmp_path):
    out = tmp_path / "sst2-adalora"
    metrics, _ = finetune(out, "--model", str(checkpoints["gpt-tiny"]), *SST2,
                          "--peft_config", str(REPO / "recipes" / "configs" / "finetune" / "adalora.json"))  # fmt: skip
    assert metrics["method"].endswith("adalora.json")
    assert ModelCard.load(out / "README.md").data.tags[-1] == "adalora"  # the file by its name, not its path
    config = json.loads((out / "adapter_config.json").read_text())
    assert config["peft_type"] == "ADALORA" and "score" in config["modules_to_save"]


def test_prefix_tuning_on_an_encoder_is_refused_with_the_alternatives(checkpoints, tmp_path):
    with pytest.raises(ValueError, match="prefix tuning .* hfzoo encoders and BERT do not. Use --method lora"):
        finetune(tmp_path / "x", "--model", str(checkpoints["bert-tiny"]), *SST2, "--method", "prefix")


@pytest.mark.parametrize(
    ("preset", "head"),
    [("gpt-tiny", "ZooDecoderForQuestionAnswering"), ("t5-tiny", "ZooEncoderDecoderForQuestionAnswering")],
)
def test_question_answering_on_hfzoo_decoders_and_encoder_decoders(preset, head, checkpoints, tmp_path):
    out = tmp_path / "squad"
    metrics, predictions = finetune(
        out, "--model", str(checkpoints[preset]), "--task", "question-answering",
        "--train_file", str(DATA / "squad" / "dev-v1.1.json"), "--validation_split", "0.05",
        "--max_length", "96", "--doc_stride", "32", "--max_steps", "2", "--max_eval_samples", "8",
    )  # fmt: skip
    assert_run_outputs(out, metrics, {"exact_match", "f1"}, adapter=False)
    assert len(predictions) == 8
    model, loading_info = AutoModelForQuestionAnswering.from_pretrained(out, output_loading_info=True)
    assert type(model).__name__ == head
    assert not loading_info["missing_keys"] and not loading_info["unexpected_keys"]


def test_token_classification_on_an_hfzoo_encoder_decoder_tags_from_its_encoder(checkpoints, tmp_path):
    out = tmp_path / "conll-t5"
    metrics, predictions = finetune(out, "--model", str(checkpoints["t5-tiny"]), *CONLL, "--max_steps", "2")
    assert_run_outputs(out, metrics, {"precision", "recall", "f1", "accuracy"}, adapter=False)
    assert len(predictions) == 32
    model, loading_info = AutoModelForTokenClassification.from_pretrained(out, output_loading_info=True)
    assert type(model).__name__ == "ZooEncoderDecoderForTokenClassification"
    assert not loading_info["missing_keys"] and not loading_info["unexpected_keys"]
    assert not any(name.startswith("model.decoder.layers") for name in model.state_dict())


# ------------------------------------------------------------------------------------------ native checkpoints
def test_native_bert_checkpoint_through_the_recipe(checkpoints, tmp_path):
    """A plain transformers BERT folder (no hfzoo code in it) fine-tunes with the same command."""
    tokenizer = AutoTokenizer.from_pretrained(checkpoints["bert-tiny"])
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=64, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=128, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    torch.manual_seed(0)
    BertForSequenceClassification(config).save_pretrained(tmp_path / "bert")
    tokenizer.save_pretrained(tmp_path / "bert")
    out = tmp_path / "rte-native-bert"
    metrics, _ = finetune(out, "--model", str(tmp_path / "bert"), "--task", "sequence-classification",
                          "--dataset", str(DATA / "rte"), "--text_column", "sentence1",
                          "--text_pair_column", "sentence2", "--method", "lora", "--max_steps", "null",
                          "--num_epochs", "2")  # fmt: skip
    assert_run_outputs(out, metrics, CLASSIFICATION_KEYS, adapter=True)
    assert metrics["family"] == "encoder" and metrics["steps"] == 16 and metrics["epochs"] == 2.0  # 64 rows, 8/step
    adapter = load_file(out / "adapter_model.safetensors")
    assert any(k.startswith("base_model.model.classifier.") for k in adapter)
    assert any("lora_A" in k for k in adapter)


def test_native_gpt2_without_a_pad_token_pads_with_eos(checkpoints, tmp_path):
    hfzoo_tokenizer = AutoTokenizer.from_pretrained(checkpoints["gpt-tiny"])
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=hfzoo_tokenizer.backend_tokenizer, bos_token="<s>",
                                        eos_token="</s>", unk_token="<unk>")  # fmt: skip
    assert tokenizer.pad_token is None
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=len(tokenizer), n_embd=64, n_layer=2, n_head=2, n_positions=256)
    GPT2ForSequenceClassification(config).save_pretrained(tmp_path / "gpt2")
    tokenizer.save_pretrained(tmp_path / "gpt2")
    out = tmp_path / "sst2-gpt2"
    metrics, predictions = finetune(out, "--model", str(tmp_path / "gpt2"), *SST2, "--method", "lora")
    assert metrics["family"] == "decoder" and metrics["model_kwargs"]["pad_token_id"] == tokenizer.eos_token_id
    assert len(predictions) == 32


# ------------------------------------------------------------------------------------------ distributed
@pytest.mark.slow
def test_two_ddp_processes_predict_what_one_process_does(checkpoints, tmp_path):
    """Under `accelerate launch` (2 CPU processes, gloo) each process predicts its share of the validation set (31
    rows: one process gets a padding row) and the main process gathers them back into order. A learning rate of
    1e-12 leaves the weights as they were, so both runs must predict exactly the same."""
    args = ["--model", str(checkpoints["gpt-tiny"]), *SST2, "--max_eval_samples", "31", "--learning_rate", "1e-12"]
    _, single = finetune(tmp_path / "one", *args)
    launch = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file",
              str(REPO / "recipes" / "configs" / "accelerate" / "cpu_ddp.yaml"), str(REPO / "recipes" / "finetune.py")]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_EVALUATE_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
    command = [*launch, *QUICK, *args, "--output_dir", str(tmp_path / "two")]
    result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    assert next(r for r in read_log(tmp_path / "two") if r["event"] == "start")["num_processes"] == 2
    two = [json.loads(line) for line in (tmp_path / "two" / PREDICTIONS_FILE).read_text().splitlines()]
    assert two == single and len(two) == 31


def test_max_length_beyond_the_models_positions_is_refused_before_training(checkpoints, tmp_path):
    """gpt-tiny has learned positions for 512 tokens: longer inputs trained, then failed at evaluation."""
    out = tmp_path / "too-long"
    with pytest.raises(ValueError, match=r"'max_length' is 1024.*at most 512 tokens.*max_length <= 512"):
        finetune(out, "--model", str(checkpoints["gpt-tiny"]), *SST2, "--max_length", "1024")
    assert not (out / "log.jsonl").exists()  # refused before the first step


def test_a_failure_in_the_final_evaluation_still_leaves_the_weights(checkpoints, tmp_path, monkeypatch):
    """The weights are saved when training is done, before the evaluation that may fail."""
    from hfzoo.training import task_run

    def broken_evaluation(*args, **kwargs):
        raise RuntimeError("evaluation failed")

    monkeypatch.setattr(task_run, "predict_all", broken_evaluation)
    out = tmp_path / "eval-fails"
    with pytest.raises(RuntimeError, match="evaluation failed"):
        finetune(out, "--model", str(checkpoints["bert-tiny"]), *SST2, "--max_steps", "2")
    trained = load_file(out / "model.safetensors")
    pretrained = load_file(checkpoints["bert-tiny"] / "model.safetensors")
    assert any(not torch.equal(trained[k], pretrained[k]) for k in trained if k in pretrained)  # trained, not initial
