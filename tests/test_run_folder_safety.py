"""No run clobbers another (issue 37 items 1-4), through the command line as users run it (`hfzoo.cli.main`).

1. `pretrain --overwrite_output_dir` deleted the user's files named like weight shards (`model-00001-of-00003.
   safetensors`, both files of a `-of-00002` pair): transformers' `save_pretrained` cleans its folder of them.
2. `finetune --model D --output_dir D --overwrite_output_dir true --method full` replaced D's weights, exit 0;
   `compose` likewise. `convert` already refused the same case.
3. `hfzoo generate` on a folder whose weights are only `pytorch_model.bin` unpickled it (a benign one generated, a
   crafted one failed with torch's traceback); `finetune` and `convert` refuse it by name.
4. Two runs wrote one folder at once (one died with a `SafetensorError`, the log interleaved both), and a `--resume`
   was accepted while another process still wrote there. Now one run per folder holds its lock (`hfzoo.training.
   run_lock`); a crashed run's lock is stale and taken over; another host's is refused until removed.
"""

from __future__ import annotations

import csv
import json
import os
import pickle
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from tests.helpers.native_models import native_model
from tests.helpers.pickles import CreatesMarker
from transformers import AutoModelForCausalLM

from hfzoo.cli import main as cli
from hfzoo.core.files import RUN_LOCK
from hfzoo.core.refusals import Refusal
from hfzoo.training import list_checkpoints
from hfzoo.training.logging import read_log
from hfzoo.training.run_lock import holding_run_folder

REPO = Path(__file__).resolve().parents[1]
CONFIG = REPO / "recipes" / "configs" / "test-gpt-tiny-clm.yaml"
TINY_PRETRAIN = ["--config", str(CONFIG), "--max_steps", "2", "--save_every", "100", "--eval_every", "2"]
MINE = b"the user's file, not written by hfzoo\n"


def hfzoo(*args: str | Path) -> None:
    """`hfzoo <args>` in this process; accelerate's process state reset afterwards, as a new process would have it."""
    try:
        cli([str(arg) for arg in args])
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)


def snapshot(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


# ----------------------------------------------------------------------------------------- 1. files named like shards
def test_pretrain_with_overwrite_keeps_the_users_files_named_like_weight_shards(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    names = ["model-00001-of-00003.safetensors", "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    for name in names:
        (out / name).write_bytes(MINE)
    hfzoo("pretrain", *TINY_PRETRAIN, "--output_dir", out, "--overwrite_output_dir", "true")
    assert {name: (out / name).read_bytes() for name in names if (out / name).exists()} == dict.fromkeys(names, MINE)
    assert AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True).config.model_type == "hfzoo_decoder"
    assert not [p.name for p in out.iterdir() if p.name.startswith(".")]  # no staging folder, no lock left


# ------------------------------------------------------------------------------------ 2. a run over its own input
@pytest.fixture
def model_folder(tmp_path, tiny_model, tokenizer, tokenizer_overrides) -> Path:
    """A gpt-tiny checkpoint with the test tokenizer."""
    folder = tmp_path / "model"
    tiny_model("gpt-tiny", **tokenizer_overrides).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def task_files(tmp_path) -> list[str]:
    rows = [("a short sentence about files", 0), ("another one about folders", 1)] * 8
    for split in ("train", "validation"):
        with open(tmp_path / f"{split}.csv", "w", newline="", encoding="utf-8") as handle:
            csv.writer(handle).writerows([("text", "label"), *rows])
    return ["--task", "sequence-classification", "--train_file", str(tmp_path / "train.csv"), "--validation_file",
            str(tmp_path / "validation.csv"), "--max_steps", "2", "--per_device_batch_size", "4"]  # fmt: skip


def test_finetune_into_its_own_model_folder_is_refused_naming_it(model_folder, task_files):
    before = snapshot(model_folder)
    refused = rf"finetune: the input {model_folder} and the output {model_folder} are the same folder"
    with pytest.raises(Refusal, match=refused):
        hfzoo("finetune", "--model", model_folder, "--output_dir", model_folder, "--overwrite_output_dir", "true",
              "--method", "full", *task_files)  # fmt: skip
    with pytest.raises(Refusal, match="one inside the other"):
        hfzoo("finetune", "--model", model_folder, "--output_dir", model_folder / "run", "--method", "full",
              *task_files)  # fmt: skip
    assert snapshot(model_folder) == before


def test_compose_into_its_model_or_an_adapter_folder_is_refused_naming_it(model_folder, task_files, tmp_path):
    adapter = tmp_path / "adapter"
    base = AutoModelForCausalLM.from_pretrained(model_folder, trust_remote_code=True)
    get_peft_model(base, LoraConfig(r=2, target_modules=["o_proj"], init_lora_weights=False)).save_pretrained(adapter)
    before = snapshot(tmp_path)
    for output in (model_folder, adapter):
        with pytest.raises(Refusal, match=rf"compose: the input \S+ and the output {output} are the same folder"):
            hfzoo("compose", "--model", model_folder, "--adapters", f"a={adapter}", "--strategy", "average",
                  "--output_dir", output, "--overwrite_output_dir", "true", *task_files)  # fmt: skip
    assert snapshot(tmp_path) == before


# -------------------------------------------------------------------------------- 3. generate on pickled weights
@pytest.mark.parametrize("crafted", [False, True], ids=["benign", "crafted"])
def test_generate_refuses_pickled_weights_by_name_and_never_unpickles_them(crafted, tmp_path, tokenizer):
    folder, marker = tmp_path / "native", tmp_path / "code-ran"
    model = native_model("gpt2", "GPT2LMHeadModel", vocab_size=len(tokenizer))
    model.config.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    if crafted:
        (folder / "pytorch_model.bin").write_bytes(pickle.dumps(CreatesMarker(marker)))
    else:
        torch.save(model.state_dict(), folder / "pytorch_model.bin")
    with pytest.raises(Refusal, match=r"generate: .* has no model\.safetensors .*It has pytorch_model\.bin, a pickle"):
        hfzoo("generate", folder, "--prompt", "The module", "--max_new_tokens", "2")
    assert not marker.exists()


# ------------------------------------------------------------------------------------ 4. one run per output folder
def test_a_run_into_a_folder_another_run_holds_is_refused_naming_it_and_resume_too(tmp_path, capsys):
    out = tmp_path / "run"
    with holding_run_folder(out, "pretrain"):  # another run of this process holds it: as alive as any
        for extra in ([], ["--resume", "true"]):
            with pytest.raises(Refusal, match=rf"pretrain: the output folder {out} is in use by hfzoo pretrain, pid "
                               rf"{os.getpid()} on host {socket.gethostname()}, started "):  # fmt: skip
                hfzoo("pretrain", *TINY_PRETRAIN, "--output_dir", out, *extra)
            assert len(capsys.readouterr().err.strip().splitlines()) == 1
        assert os.listdir(out) == [RUN_LOCK]  # the refused runs wrote nothing, and left the holder's lock
    assert not out.exists()  # the holder created the folder only for its lock


def _plant_lock(folder: Path, **record) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / RUN_LOCK).write_text(json.dumps({"command": "pretrain", "started": "2020-01-01 00:00:00", **record}))


def _start_time(pid: int) -> int:
    text = Path(f"/proc/{pid}/stat").read_text()
    return int(text[text.rindex(")") + 2 :].split()[19])


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="process start times come from Linux's /proc")
@pytest.mark.parametrize("ended", ["exited", "zombie", "pid-reused"])
def test_a_crashed_runs_lock_is_stale_and_taken_over(ended, tmp_path):
    """A lock whose processes all ended (reaped, a zombie not yet reaped, or a pid now another program's) does not
    keep the folder: the new run takes it over, and releases it at its end."""
    out = tmp_path / "run"
    if ended == "pid-reused":  # this very process, but started at another time: not the run that wrote the lock
        pid, started = os.getpid(), _start_time(os.getpid()) - 1
    else:
        process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
        pid, started = process.pid, _start_time(process.pid)
        os.kill(pid, signal.SIGKILL)
        if ended == "exited":
            process.wait()
        else:
            while Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                time.sleep(0.01)
    _plant_lock(out, host=socket.gethostname(), pid=pid, processes={str(pid): started})
    try:
        hfzoo("pretrain", *TINY_PRETRAIN, "--output_dir", out)
    finally:
        if ended == "zombie":
            process.wait()
    assert read_log(out)[-1]["event"] == "end" and not (out / RUN_LOCK).exists()


def test_another_hosts_lock_is_refused_naming_the_host_until_removed(tmp_path):
    out = tmp_path / "run"
    _plant_lock(out, host="elsewhere", pid=1, processes={"1": None})
    with pytest.raises(Refusal, match=rf"hfzoo pretrain, pid 1 on host elsewhere, .*remove {out / RUN_LOCK}"):
        hfzoo("pretrain", *TINY_PRETRAIN, "--output_dir", out)
    (out / RUN_LOCK).unlink()
    hfzoo("pretrain", *TINY_PRETRAIN, "--output_dir", out)
    assert read_log(out)[-1]["event"] == "end"


def test_the_lock_is_released_when_the_run_is_refused_inside(tmp_path):
    """Refused after it took the lock (a data file without the text column): no lock, and no folder, left."""
    (tmp_path / "corpus.csv").write_text("words\nsome text\n")
    out = tmp_path / "run"
    with pytest.raises(Refusal, match="no 'text' column"):
        hfzoo("pretrain", *TINY_PRETRAIN, "--dataset", tmp_path / "corpus.csv", "--output_dir", out)
    assert not out.exists()


@pytest.mark.slow
def test_two_real_runs_into_one_folder_then_the_killed_one_resumes(tmp_path, capsys):
    """A real `hfzoo pretrain` writes the folder (a process of its own): a second one, fresh or `--resume`, is
    refused naming its pid; once it is SIGKILLed, its lock is stale and `--resume` continues it."""
    out = tmp_path / "run"
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"}
    command = [sys.executable, "-m", "hfzoo.cli", "pretrain", "--config", str(CONFIG), "--max_steps", "100000",
               "--save_every", "2", "--eval_every", "100000", "--output_dir", str(out)]  # fmt: skip
    with open(tmp_path / "first.log", "w") as log:
        first = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.monotonic() + 600
            while not list_checkpoints(out) and first.poll() is None and time.monotonic() < deadline:
                time.sleep(0.2)
            assert first.poll() is None, (tmp_path / "first.log").read_text()[-3000:]
            for extra in ([], ["--resume", "true"]):
                with pytest.raises(Refusal, match=rf"in use by hfzoo pretrain, pid {first.pid} on host "):
                    hfzoo("pretrain", *TINY_PRETRAIN, "--output_dir", out, *extra)
        finally:
            first.kill()
            first.wait()
    step = int(list_checkpoints(out)[-1].name.split("-")[-1])
    hfzoo("pretrain", "--config", CONFIG, "--max_steps", step + 2, "--save_every", "2", "--eval_every", "100000",
          "--output_dir", out, "--resume", "true")  # fmt: skip
    starts = [record for record in read_log(out) if record["event"] == "start"]
    assert [record["step"] for record in starts] == [0, step] and read_log(out)[-1]["step"] == step + 2
    assert load_file(out / "model.safetensors") and not (out / RUN_LOCK).exists()
