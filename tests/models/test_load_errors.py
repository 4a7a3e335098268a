"""Loading a broken checkpoint folder fails naming the file and what is wrong with it; weights never load by pickle.

Real files on disk: a gpt-tiny checkpoint saved by `save_pretrained`, then truncated, emptied, deleted or replaced by a
`pytorch_model.bin` written with `torch.save` (a pickle). Loaded through the Auto classes (hfzoo's
`ZooPreTrainedModel.from_pretrained`) and through the fine-tuning recipe (`task_model.load_model`), as users load them.
"""

import json
import shutil
from pathlib import Path

import pytest
import torch
from tests.helpers.recipe_runs import finetune_on, one_step_finetune_args
from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification

from hfzoo.commands.finetune import parse_args
from hfzoo.models.checkpoint_files import CheckpointFileError
from hfzoo.tasks import SequenceClassification, load_examples
from hfzoo.training.task_model import load_model


@pytest.fixture
def checkpoint(gpt_tiny_checkpoint: Path, tmp_path: Path) -> Path:
    """A copy of an intact gpt-tiny checkpoint with its tokenizer, for the test to break."""
    return Path(shutil.copytree(gpt_tiny_checkpoint, tmp_path / "checkpoint"))


def truncate(path: Path, keep: float) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.mark.parametrize("keep", [0.5, 0.0], ids=["half", "empty"])
def test_truncated_weights_name_the_file(checkpoint: Path, keep: float):
    truncate(checkpoint / "model.safetensors", keep)
    with pytest.raises(CheckpointFileError, match="truncated or corrupted") as error:
        AutoModelForCausalLM.from_pretrained(checkpoint)
    assert str(checkpoint / "model.safetensors") in str(error.value)


def test_pickled_weights_are_never_loaded(checkpoint: Path):
    """Without model.safetensors transformers would unpickle pytorch_model.bin; hfzoo models refuse, naming both."""
    weights = AutoModelForCausalLM.from_pretrained(checkpoint).state_dict()
    (checkpoint / "model.safetensors").unlink()
    torch.save(weights, checkpoint / "pytorch_model.bin")
    for load in (
        lambda: AutoModelForCausalLM.from_pretrained(checkpoint),
        lambda: AutoModelForSequenceClassification.from_pretrained(checkpoint, num_labels=2),
    ):
        with pytest.raises(CheckpointFileError, match="no model.safetensors.*pytorch_model.bin, a pickle"):
            load()
    with pytest.raises(ValueError, match="safetensors only"):
        AutoModelForCausalLM.from_pretrained(checkpoint, use_safetensors=False)


def test_a_missing_shard_and_a_pickle_named_in_config_are_refused(checkpoint: Path):
    weights = checkpoint / "model.safetensors"
    index = {"metadata": {}, "weight_map": {"lm_head.weight": "model-00002-of-00002.safetensors"}}
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(index))
    weights.rename(checkpoint / "model-00001-of-00002.safetensors")
    with pytest.raises(CheckpointFileError, match="model-00002-of-00002.safetensors is missing"):
        AutoModelForCausalLM.from_pretrained(checkpoint)
    config = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**config, "transformers_weights": "adapter_model.bin"}))
    with pytest.raises(CheckpointFileError, match="config.json names its weights 'adapter_model.bin'"):
        AutoModelForCausalLM.from_pretrained(checkpoint)


def test_recipe_names_a_truncated_weights_file(checkpoint: Path, tmp_path: Path):
    truncate(checkpoint / "model.safetensors", 0.5)
    with pytest.raises(CheckpointFileError, match="truncated") as error:
        finetune_on(checkpoint, tmp_path)
    assert str(checkpoint / "model.safetensors") in str(error.value)


def test_load_model_names_invalid_json_in_config_with_its_line(checkpoint: Path, tmp_path: Path, tokenizer):
    """`load_model`, which the fine-tuning and composition recipes load their model with."""
    config = checkpoint / "config.json"
    config.write_text(config.read_text().replace('"hidden_size": 128,', '"hidden_size": 128'))
    options = parse_args(one_step_finetune_args(checkpoint, tmp_path)).data
    task = SequenceClassification(options)
    task.fit_labels(*load_examples(task, options))
    with pytest.raises(CheckpointFileError, match=r"config.json is not valid JSON: .* at line \d+, column \d+") as error:
        load_model(options, task, tokenizer)
    assert str(config) in str(error.value)


def test_recipe_names_a_wrongly_typed_config_value_with_its_file(checkpoint: Path, tmp_path: Path):
    config = checkpoint / "config.json"
    config.write_text(config.read_text().replace('"hidden_size": 128,', '"hidden_size": "128",'))
    with pytest.raises(TypeError, match=r"config.json: hidden_size must be int, got '128' \(str\)") as error:
        finetune_on(checkpoint, tmp_path)
    assert str(config) in str(error.value)
