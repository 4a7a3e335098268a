"""`hfzoo generate` refuses in one line, exit status 2 (issue 37 items 6 and 9): a config that does not match its
weights (an edited `num_hidden_layers` loaded random layers or dropped some, exit 0), a task checkpoint without a
language model head (generated with a random one), and input it cannot use (an empty prompt, no new tokens, no
beam, a negative temperature, a device torch lacks, a path that does not exist, a Hub name offline, a folder
without a tokenizer or whose model only its own code defines), each of which ended in a traceback."""

import json
import shutil

import huggingface_hub
import pytest
import torch
from transformers import LlamaConfig, LlamaForSequenceClassification

from hfzoo.cli import main

PROMPT = ["--prompt", "Return a new list", "--max_new_tokens", "3"]


def refusal_line(capsys, argv: list[str]) -> str:
    """The one line `hfzoo generate <argv>` prints to stderr as it exits with status 2."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["generate", *map(str, argv)])
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip() and "Loading weights" not in line]
    assert exit_info.value.code == 2 and "Traceback" not in err and len(lines) == 1, err
    assert lines[0].startswith("generate: "), lines
    return lines[0]


def _edited(checkpoint, tmp_path, **values):
    folder = shutil.copytree(checkpoint, tmp_path / "edited")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, **values}))
    return folder


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        ({"num_hidden_layers": 6}, "declares 24 weights the file lacks: model.layers.4.* (12 tensors)"),
        ({"num_hidden_layers": 2}, "holds 24 weights its config does not declare: model.layers.2.* (12 tensors)"),
        ({"intermediate_size": 100}, "weights have other shapes (model.layers.0.mlp.down_proj.weight [128, 512]"),
    ],
    ids=["layers+2", "layers-2", "intermediate_size"],
)
def test_a_config_that_does_not_match_its_weights_is_refused(gpt_tiny_checkpoint, tmp_path, capsys, edit, expected):
    folder = _edited(gpt_tiny_checkpoint, tmp_path, **edit)
    line = refusal_line(capsys, [folder, *PROMPT])
    assert f"{folder / 'model.safetensors'} does not match {folder / 'config.json'}" in line and expected in line


def test_a_task_checkpoint_without_a_language_model_head_is_refused(tmp_path, tokenizer, capsys):
    """A native classifier with an untied head loaded as a causal LM with a random lm_head, and generated."""
    config = LlamaConfig(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=48, num_hidden_layers=1,
                         num_attention_heads=2, num_key_value_heads=2, pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    LlamaForSequenceClassification(config).save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    line = refusal_line(capsys, [tmp_path, *PROMPT])
    assert f"{tmp_path} holds a LlamaForSequenceClassification checkpoint without weights for lm_head.weight" in line


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (["--prompt", "", "--max_new_tokens", "3"], "--prompt number 1 is empty (no tokens)"),
        ([*PROMPT, "--max_new_tokens", "0"], "--max_new_tokens is 0: generate at least 1 token"),
        ([*PROMPT, "--max_new_tokens", "-2"], "--max_new_tokens is -2"),
        ([*PROMPT, "--num_beams", "0"], "--num_beams is 0: it must be at least 1"),
        ([*PROMPT, "--do_sample", "--temperature", "-1"], "--temperature is -1.0: it must be a positive number"),
        ([*PROMPT, "--temperature", "-1"], "--temperature is -1.0"),
        ([*PROMPT, "--top_p", "1.5"], "--top_p is 1.5: it must be in (0, 1]"),
        pytest.param(
            [*PROMPT, "--device", "cuda"], "--device cuda: torch cannot use it here",
            marks=pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA is available here"),
        ),
        ([*PROMPT, "--device", "gpu"], "--device gpu: torch cannot use it here"),
    ],
    ids=["empty-prompt", "no-new-tokens", "negative-new-tokens", "no-beams", "negative-temperature",
         "negative-temperature-greedy", "top-p", "cuda", "unknown-device"],
)  # fmt: skip
def test_generation_settings_it_cannot_use_are_refused(gpt_tiny_checkpoint, capsys, args, expected):
    assert expected in refusal_line(capsys, [gpt_tiny_checkpoint, *args])


def test_a_model_path_that_does_not_exist_is_named(tmp_path, capsys):
    """It was sent to the Hub: "Repo id must be in the form 'repo_name' or 'namespace/repo_name'"."""
    assert refusal_line(capsys, [tmp_path / "missing", *PROMPT]) == f"generate: {tmp_path / 'missing'} does not exist"


def test_a_hub_name_offline_is_one_line(capsys, monkeypatch):
    """Four chained tracebacks before."""
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # read when huggingface_hub is imported
    line = refusal_line(capsys, ["hfzoo-tests/no-such-model", *PROMPT])
    assert "hfzoo-tests/no-such-model is not a local folder, and the Hub does not give a model of that name" in line


def test_a_folder_without_a_tokenizer_is_refused(gpt_tiny_checkpoint, tmp_path, capsys):
    """transformers' "Couldn't instantiate the backend tokenizer" traceback before."""
    folder = tmp_path / "no-tokenizer"
    folder.mkdir()
    for name in ("config.json", "model.safetensors"):
        shutil.copy(gpt_tiny_checkpoint / name, folder / name)
    assert f"{folder} has no tokenizer hfzoo generate can load" in refusal_line(capsys, [folder, *PROMPT])


def test_a_folder_whose_model_only_its_own_code_defines_is_refused_without_running_it(
    gpt_tiny_checkpoint, tmp_path, capsys
):
    folder = _edited(gpt_tiny_checkpoint, tmp_path, model_type="mystery",
                     auto_map={"AutoConfig": "configuration_mystery.MysteryConfig"})  # fmt: skip
    marker = tmp_path / "ran"
    (folder / "configuration_mystery.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    line = refusal_line(capsys, [folder, *PROMPT])
    assert "is a 'mystery' model, which only the code it ships defines" in line and "auto_map" in line
    assert not marker.exists()
