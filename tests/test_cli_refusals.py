"""A refused run ends with one line naming what is wrong and exit status 2, from every subcommand and from the
recipe scripts alike; `--debug` (or HFZOO_DEBUG=1) shows the traceback instead. Errors hfzoo did not compose itself
(a bug, or a third-party error hfzoo does not check for) keep their traceback.

Users meet these through `hfzoo <command>` and `python recipes/<command>.py`: the tests call the same entry points
in-process, and once as a real process for the exit status and what reaches the terminal.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.cli import main as hfzoo_main
from hfzoo.commands import pretrain
from hfzoo.core.refusals import is_refusal

REPO = Path(__file__).resolve().parents[1]
SMALL = dict(hidden_size=32, num_hidden_layers=1, num_attention_heads=2, intermediate_size=64, vocab_size=64)


def refusal_line(capsys, run) -> str:
    """The one line `run` prints to stderr as it exits with status 2."""
    with pytest.raises(SystemExit) as exit_info:
        run()
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err
    return err.strip()


def caught(action) -> BaseException:
    try:
        action()
    except Exception as error:  # noqa: BLE001 (the test classifies whatever was raised)
        return error
    raise AssertionError("nothing was raised")


# ------------------------------------------------------------------------------------ what counts as a refusal
def test_errors_hfzoo_composes_are_refusals_and_third_party_errors_are_not(tmp_path):
    assert is_refusal(caught(lambda: hfzoo.preset_config("no-such-preset")))  # hfzoo's own check
    assert is_refusal(caught(lambda: open(tmp_path / "missing.yaml")))  # a path that does not exist names itself
    assert not is_refusal(caught(lambda: json.loads("{")))  # a ValueError raised outside hfzoo: a bug to show
    assert not is_refusal(caught(lambda: torch.zeros(2) @ torch.zeros(3)))


# ------------------------------------------------------------------------ one line, status 2, traceback on request
PRETRAIN_REFUSED = ["--preset", "gpt-tiny", "--objective", "clm", "--model", "{vocab_size: 69}"]


def test_a_refusal_is_one_line_and_the_traceback_is_behind_debug(capsys, monkeypatch, tmp_path):
    out = tmp_path / "run"
    monkeypatch.setenv("HFZOO_DEBUG", "0")  # restored after the test: --debug sets it
    for run in (lambda: pretrain.main([*PRETRAIN_REFUSED, "--output_dir", str(out)]),
                lambda: hfzoo_main(["pretrain", *PRETRAIN_REFUSED, "--output_dir", str(out)])):  # fmt: skip
        line = refusal_line(capsys, run)
        assert line.startswith("pretrain: config key 'model': vocab_size")
    with pytest.raises(ValueError, match="vocab_size"):
        hfzoo_main(["pretrain", "--debug", *PRETRAIN_REFUSED, "--output_dir", str(out)])
    monkeypatch.setenv("HFZOO_DEBUG", "0")
    with pytest.raises(ValueError, match="vocab_size"):
        pretrain.main([*PRETRAIN_REFUSED, "--output_dir", str(out), "--debug"])
    monkeypatch.setenv("HFZOO_DEBUG", "1")
    with pytest.raises(ValueError, match="vocab_size"):
        pretrain.main([*PRETRAIN_REFUSED, "--output_dir", str(out)])
    assert not out.exists()


def test_hfzoo_and_the_recipe_script_exit_2_with_the_same_single_line(tmp_path):
    """Real processes: the exit status and everything printed, as a shell sees them."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    env.pop("HFZOO_DEBUG", None)
    args = [*PRETRAIN_REFUSED, "--output_dir", str(tmp_path / "run")]
    commands = {
        "hfzoo": [sys.executable, "-m", "hfzoo.cli", "pretrain", *args],
        "script": [sys.executable, str(REPO / "recipes" / "pretrain.py"), *args],
    }
    processes = {name: subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
                 for name, command in commands.items()}  # fmt: skip (both at once: each spends its time importing)
    runs = {name: (process.communicate(timeout=300), process.returncode) for name, process in processes.items()}
    for (stdout, stderr), status in runs.values():
        assert status == 2 and stdout == ""
        assert len(stderr.splitlines()) == 1 and "config key 'model'" in stderr, stderr
    assert runs["hfzoo"][0][1] == runs["script"][0][1]
    assert not (tmp_path / "run").exists()


# -------------------------------------------------- issue 27 item 6: overrides of what the tokenizer decides
@pytest.mark.parametrize("args,key", [
    (["--model", "{vocab_size: 69}"], "vocab_size"),
    (["--model", "{pad_token_id: 3}"], "pad_token_id"),
    (["--model.eos_token_id", "2"], "eos_token_id"),
    (["--config", "{yaml}"], "pad_token_id"),
], ids=["vocab_size", "pad_token_id", "dotted", "yaml"])  # fmt: skip
def test_model_overrides_the_tokenizer_decides_are_refused_before_any_file(args, key, tmp_path, capsys):
    yaml_file = tmp_path / "run.yaml"
    yaml_file.write_text("preset: gpt-tiny\nobjective: clm\nmodel:\n  pad_token_id: 3\n")
    args = [str(yaml_file) if a == "{yaml}" else a for a in args]
    base = [] if args[0] == "--config" else ["--preset", "gpt-tiny", "--objective", "clm"]
    out = tmp_path / "run"
    line = refusal_line(capsys, lambda: pretrain.main([*base, *args, "--output_dir", str(out)]))
    assert f"config key 'model': {key} " in line and "tokenizer" in line
    assert not out.exists()


def test_a_model_override_the_tokenizer_does_not_decide_still_applies():
    config = pretrain.parse_args(["--preset", "gpt-tiny", "--objective", "clm", "--model", "{hidden_dropout: 0.0}"])
    assert config.model == {"hidden_dropout": 0.0}


# ------------------------------------------- issue 24 item 5: a convert refusal names the switch the user set
def test_convert_refusal_is_one_line_naming_the_switch_the_user_set(tmp_path, capsys):
    torch.manual_seed(0)
    config = hfzoo.preset_config("gpt-tiny", position_embedding="rotary", **SMALL)
    AutoModelForCausalLM.from_config(config).save_pretrained(tmp_path / "rotary")
    capsys.readouterr()  # the save's progress bar
    out = tmp_path / "native"
    line = refusal_line(capsys, lambda: hfzoo_main(["convert", "to-native", str(tmp_path / "rotary"), str(out)]))
    assert line.startswith("convert: ") and "position_embedding='rotary'" in line
    assert not out.exists()


def test_a_mistyped_model_path_is_named_not_looked_up_on_the_hub(tmp_path, capsys):
    missing = str(tmp_path / "no-such-model")
    for argv in (["convert", "to-native", missing, str(tmp_path / "out")],
                 ["convert", "adapter-to-native", missing, str(tmp_path / "out"), "--base", missing],
                 ["finetune", "--model", missing, "--task", "sequence-classification", "--dataset", missing,
                  "--output_dir", str(tmp_path / "out")]):  # fmt: skip
        line = refusal_line(capsys, lambda: hfzoo_main(argv))
        assert line.startswith(f"{argv[0]}: ") and f"{missing} does not exist" in line
    assert not (tmp_path / "out").exists()
