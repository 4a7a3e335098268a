"""`hfzoo pretrain --objective bilm`: ELMo's biLM trained by the pretraining recipe on the default corpus."""

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from transformers import AutoModel, AutoModelForPreTraining, AutoTokenizer

from hfzoo.commands.pretrain import main
from hfzoo.data.collators import BiLMCollator
from hfzoo.training.logging import read_log


def run_pretraining(*args: str):
    try:
        return main(list(args))
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)


def test_help_lists_bilm(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    assert "bilm" in capsys.readouterr().out


def test_bilm_objective_needs_a_bilm_preset():
    with pytest.raises(SystemExit, match="'bilm' trains bilm models, but preset 'gpt-tiny' is a decoder.*elmo-tiny"):
        main(["--preset", "gpt-tiny", "--objective", "bilm", "--output_dir", "unused"])


def test_collator_labels_are_the_inputs_with_padding_ignored(tokenizer):
    batch = BiLMCollator(tokenizer)([{"input_ids": [5, 6, 7]}, {"input_ids": [8]}])
    assert batch["input_ids"].tolist() == [[5, 6, 7], [8, tokenizer.pad_token_id, tokenizer.pad_token_id]]
    assert batch["labels"].tolist() == [[5, 6, 7], [8, -100, -100]]
    assert batch["attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_pretraining_lowers_the_loss_and_saves_a_loadable_biLM(tmp_path):
    output_dir = run_pretraining(
        "--preset", "elmo-tiny", "--objective", "bilm", "--output_dir", str(tmp_path / "elmo"),
        "--max_train_samples", "60", "--max_eval_samples", "10", "--vocab_size", "384", "--block_size", "32",
        "--per_device_batch_size", "8", "--learning_rate", "1e-2", "--warmup_steps", "3", "--max_steps", "40",
        "--log_every", "1", "--eval_every", "40", "--save_every", "100", "--tensorboard", "false", "--seed", "3",
    )  # fmt: skip
    log = read_log(output_dir)
    losses = [record["loss"] for record in log if record.get("event") == "train" and "loss" in record]
    assert len(losses) == 40, log[:3]
    first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
    assert last < first - 0.5, (first, last)
    end = next(record for record in log if record.get("event") == "end")
    assert end["eval_loss"] < losses[0]
    model = AutoModelForPreTraining.from_pretrained(output_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    assert tokenizer.padding_side == "right" and model.config.vocab_size == len(tokenizer)
    inputs = tokenizer(["Return a new dictionary.", "Split the string"], return_tensors="pt", padding=True)
    with torch.no_grad():
        features = AutoModel.from_pretrained(output_dir).eval()(**inputs).hidden_states
    assert len(features) == 3 and features[0].shape[-1] == 2 * model.config.hidden_size
