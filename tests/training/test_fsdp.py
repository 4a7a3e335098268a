"""Pretraining sharded with FSDP2 (`--sharding fsdp`) on two real CPU processes (torchrun, gloo), as users launch it.

An uninterrupted 2-process run is the reference. The same run, its whole job (torchrun and both workers) killed
with SIGKILL at a random step or while it writes a checkpoint, then resumed with `--resume`, must end with
bit-identical weights. A checkpoint of the reference resumes in one process, and a one-process checkpoint on two
(DCP reshards them): those runs train on and their logs say they are not exact. No checkpoint holds a pickle file,
and the consolidated `model.safetensors` loads with the Auto class. Muon's sharded updates are the unsharded ones
and its run resumes bit-identically too. gpt-tiny with recipes/configs/test-gpt-tiny-clm
(dropout and gradient accumulation on), one thread per process.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest
import torch
from peft import LoraConfig, get_peft_model
from safetensors import safe_open
from tests.helpers.recipe_runs import complete_records, in_one_thread, launch, on_two_processes, recipe_env
from tests.helpers.run_outputs import train_losses, weights
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification, BertConfig

import hfzoo
from hfzoo.commands.pretrain import main
from hfzoo.integrations.transformers import block_class_names
from hfzoo.training import list_checkpoints
from hfzoo.training.logging import read_log

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "pretrain.py"
CONFIG = REPO / "recipes" / "configs" / "test-gpt-tiny-clm.yaml"
MAX_STEPS = 8
STEPS = ["--max_steps", str(MAX_STEPS), "--save_every", "2", "--eval_every", str(MAX_STEPS)]
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl", ".pickle", ".ckpt")


def torchrun(output_dir: Path, *extra: str) -> list[str]:
    """The sharded pretraining run on two processes."""
    sharded = ["--config", CONFIG, "--sharding", "fsdp", *STEPS, "--output_dir", output_dir]
    return on_two_processes(RECIPE, *sharded, *extra)


def run_in_process(output_dir: Path, *extra: str) -> Path:
    """The sharded pretraining run in one process, as `hfzoo pretrain` runs it."""
    return in_one_thread(main, "--config", CONFIG, "--sharding", "fsdp", *STEPS, "--output_dir", output_dir, *extra)


def starts(output_dir: Path) -> list[dict]:
    return [r for r in read_log(output_dir) if r["event"] == "start"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted 2-process sharded run: 8 steps, checkpoints every 2."""
    out = tmp_path_factory.mktemp("fsdp") / "reference"
    launch(torchrun(out))
    return out


def test_a_two_process_run_is_sharded_and_saves_one_loadable_model(reference):
    start = starts(reference)[0]
    assert (start["num_processes"], start["sharded"], start["config"]["sharding"]) == (2, True, "fsdp")
    assert "| processes | 2 (MULTI_CPU, FSDP2-sharded, cpu:0) |" in (reference / "README.md").read_text()
    step = list_checkpoints(reference)[-1]
    shards = sorted(p.name for p in (step / "state").iterdir())
    assert shards == [f"shard-0000{r}-model-00001-of-00001.safetensors" for r in (1, 2)]  # each rank its own
    assert not list(reference.glob("_fsdp*.py")), "torch's FSDP code was copied as the model's"
    model = AutoModelForCausalLM.from_pretrained(reference)
    assert type(model).__name__ == "ZooDecoderForCausalLM"
    saved = weights(reference)
    assert "lm_head.weight" not in saved  # tied to the embeddings: saved once, as an unsharded run saves it
    assert all(torch.equal(saved[name], value) for name, value in model.state_dict().items() if name in saved)
    assert torch.equal(model.lm_head.weight, saved["model.embed_tokens.weight"])
    assert sorted(train_losses(reference)) == list(range(1, MAX_STEPS + 1))


def _kill_whole_job(command: list[str], out: Path, log_file: Path, during_save: bool) -> None:
    """Start `command`; SIGKILL the whole job (torchrun and both workers) once a random step after the first checkpoint
    is logged, or (`during_save`) while the 2nd or 3rd checkpoint is being written."""
    target = random.SystemRandom().randint(3, MAX_STEPS - 2)  # the recipe seeds `random` itself
    saving = out / "checkpoints" / f".tmp-step-{2 * random.SystemRandom().randint(2, 3):08d}"  # 2nd or 3rd save
    with open(log_file, "w") as log:
        process = subprocess.Popen(command, env=recipe_env(threads=1), stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 240
        while process.poll() is None and time.monotonic() < deadline:
            if during_save and saving.is_dir():
                break
            if not during_save and (out / "log.jsonl").is_file() and any(
                r["event"] == "train" and r["step"] >= target for r in complete_records(out)
            ):
                break
            time.sleep(0.002)
        # torchrun starts each worker in a session of its own: killing its process group would leave them running.
        workers = psutil.Process(process.pid).children(recursive=True)
        for worker in workers:  # the workers first: torchrun would notice a dead one and stop the others
            worker.send_signal(signal.SIGKILL)
        process.send_signal(signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, log_file.read_text()[-3000:]
    _, alive = psutil.wait_procs(workers, timeout=10)
    assert not [w for w in alive if w.status() != psutil.STATUS_ZOMBIE], "a worker survived the kill"
    assert not (out / "model.safetensors").exists(), "the run finished before it was killed"
    if during_save:
        assert not (out / "checkpoints" / saving.name.removeprefix(".tmp-")).exists(), "killed after the save"


# Three launches of two processes each (~45 s): make test covers a killed run's resume in one process
# (tests/commands/test_pretrain_recipe.py) and a two-process checkpoint's resume (below).
@pytest.mark.slow
@pytest.mark.parametrize("during_save", [False, True], ids=["at-a-random-step", "during-a-save"])
def test_sigkill_of_the_whole_job_then_resume_gives_bit_identical_weights(reference, tmp_path, during_save):
    out = tmp_path / "killed"
    _kill_whole_job(torchrun(out), out, tmp_path / "killed.log", during_save)
    launch(torchrun(out, "--resume", "true"))
    start = starts(out)[-1]
    assert start["resumed_from"] is not None and start["resumed_exactly"] is True
    print(f"resumed from step {start['step']}")
    resumed, uninterrupted = weights(out), weights(reference)
    assert resumed.keys() == uninterrupted.keys()
    assert [k for k in resumed if not torch.equal(resumed[k], uninterrupted[k])] == []
    assert train_losses(out) == train_losses(reference)


def test_a_two_process_checkpoint_resumes_in_one_process_and_says_it_is_not_exact(reference, tmp_path):
    out = tmp_path / "resharded"
    shutil.copytree(reference, out, ignore=shutil.ignore_patterns("model.safetensors"))
    for later in list_checkpoints(out)[1:]:  # resume from the earliest kept checkpoint
        shutil.rmtree(later)
    resumed_at = int(list_checkpoints(out)[0].name.split("-")[1])
    run_in_process(out, "--resume", "true")
    start = starts(out)[-1]
    assert (start["step"], start["num_processes"], start["resumed_exactly"]) == (resumed_at, 1, False)
    # Resharded exactly: the first step after the resume starts from the reference's weights and moments, so its
    # loss is close to the reference's (another dropout stream and batch split make it differ a little).
    assert train_losses(out)[resumed_at + 1] == pytest.approx(train_losses(reference)[resumed_at + 1], rel=0.05)
    assert AutoModelForCausalLM.from_pretrained(out) is not None
    # It says so with the numbers: half the global batch (2 x 4 x 2 accumulated blocks per step, now 1 x 4 x 2).
    halved = "saved by 2 processes, resumed on 1: the global batch changes from 16 to 8 examples per optimizer step"
    assert start["not_exact_because"][0].startswith(halved)
    card = (out / "README.md").read_text()
    assert f"at step {resumed_at} on 1 processes, not bit-exact ({halved}" in card


@pytest.mark.slow  # a third launch; the 2 -> 1 test above covers resharding in the fast suite
def test_a_one_process_checkpoint_resumes_on_two(tmp_path):
    out = tmp_path / "grown"
    run_in_process(out, "--max_steps", "4")
    reference_losses = train_losses(out)
    launch(torchrun(out, "--resume", "true"))
    start = starts(out)[-1]
    assert (start["step"], start["num_processes"], start["resumed_exactly"], start["sharded"]) == (4, 2, False, True)
    assert train_losses(out)[1] == reference_losses[1] and sorted(train_losses(out)) == list(range(1, MAX_STEPS + 1))


def test_no_checkpoint_holds_a_pickle_file(reference, tmp_path):
    """Sharded checkpoints (2 processes, and 1 process with sharding: fsdp) and unsharded ones: only safetensors and
    JSON, nothing that unpickles."""
    single = run_in_process(tmp_path / "single", "--max_steps", "3")
    unsharded = run_in_process(tmp_path / "unsharded", "--max_steps", "3", "--sharding", "none")
    for run in (reference, single, unsharded):
        files = [p for p in run.rglob("*") if p.is_file()]
        assert list_checkpoints(run), run
        assert not [p for p in files if p.suffix in PICKLE_SUFFIXES], run
        in_checkpoints = [p for p in files if "checkpoints" in p.parts]
        assert {p.suffix for p in in_checkpoints} <= {".safetensors", ".json"}, run
        for path in in_checkpoints:
            assert not path.read_bytes().startswith(b"\x80"), f"{path} is a pickle"  # pickle's protocol opcode


def test_accelerates_fsdp_config_where_it_would_not_shard_is_refused_before_any_work(tmp_path, monkeypatch):
    """What `accelerate launch --config_file recipes/configs/accelerate/fsdp.yaml` sets; here accelerate would not
    shard (one CPU process), as on a CPU machine it runs DDP."""
    monkeypatch.setenv("ACCELERATE_USE_FSDP", "true")
    with pytest.raises(ValueError, match=r"its FSDP plugin shards on GPUs only; run `torchrun --nproc_per_node 2"):
        run_in_process(tmp_path / "out", "--sharding", "none")
    assert not (tmp_path / "out").exists()


@pytest.mark.slow  # a real accelerate launch of two processes; the test above covers the refusal in one
def test_accelerate_launch_with_the_fsdp_config_on_cpu_is_refused_in_one_line(tmp_path):
    config = REPO / "recipes" / "configs" / "accelerate" / "fsdp.yaml"
    launch = [str(Path(sys.executable).parent / "accelerate"), "launch", "--config_file", str(config), str(RECIPE),
              "--config", str(CONFIG), "--output_dir", str(tmp_path / "out")]  # fmt: skip
    result = subprocess.run(launch, env=recipe_env(threads=1), capture_output=True, text=True, timeout=300)
    assert result.returncode != 0
    assert "pretrain: accelerate launch asked for FSDP, but accelerate runs MULTI_CPU (unsharded)" in result.stderr
    # One line per process, no traceback of hfzoo's (accelerate's launcher prints its own on a failed process).
    assert f"{os.sep}hfzoo{os.sep}" not in result.stderr and not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("build", "blocks"),
    [
        (lambda: AutoModelForCausalLM.from_config(hfzoo.preset_config("gpt-tiny")), {"TransformerBlock"}),
        (lambda: AutoModelForSeq2SeqLM.from_config(hfzoo.preset_config("t5-tiny")), {"TransformerBlock"}),
        (lambda: get_peft_model(AutoModelForSequenceClassification.from_config(BertConfig(
            hidden_size=32, num_hidden_layers=2, num_attention_heads=2, intermediate_size=64, vocab_size=100)),
            LoraConfig(target_modules=["query", "value"])), {"BertLayer", "BertEmbeddings"}),
    ],
    ids=["decoder", "encoder-decoder", "native-bert-with-lora"],
)
def test_the_units_sharded_are_each_models_transformer_blocks(build, blocks):
    """What `fully_shard` wraps before the model itself: hfzoo's blocks, and transformers' own through PEFT."""
    model = build()
    assert block_class_names(model) == blocks
    assert sum(type(m).__name__ in blocks for m in model.modules()) >= 2


def test_muon_on_two_processes_orthogonalises_whole_matrices_as_one_process_does(tmp_path):
    """One step of hfzoo's Muon + AdamW on gpt-tiny sharded over two processes changes every weight as the unsharded
    step does (`tests/helpers/fsdp_muon_steps.py`, which says why its iterations run in float64)."""
    report = tmp_path / "differences.json"
    launch(on_two_processes(REPO / "tests" / "helpers" / "fsdp_muon_steps.py", report))
    differences = json.loads(report.read_text())
    assert "model.layers.0.mlp.down_proj.weight" in differences  # a matrix Muon trains
    assert max(differences.values()) < 1e-9, differences


# Two more launches (69-76 s of make test on a 2-core AMD EPYC): the fast suite covers its parts, Muon's exact resume
# in one process (test_pretrain_recipe), a sharded run's exact resume (the SIGKILL test above), Muon on shards (above).
@pytest.mark.slow
def test_muon_on_two_processes_keeps_sharded_momentum_and_resumes_bit_identically(tmp_path):
    reference, resumed = tmp_path / "reference", tmp_path / "resumed"
    launch(torchrun(reference, "--optimizer", "muon"))
    rows, columns = weights(reference)["model.layers.0.mlp.down_proj.weight"].shape
    momentum = "optimizer.0.model.layers.0.mlp.down_proj.weight.momentum_buffer"
    for shard in sorted((list_checkpoints(reference)[-1] / "state").iterdir()):  # each process its half of the rows
        with safe_open(shard, framework="pt") as state:
            assert state.get_slice(momentum).get_shape() == [rows // 2, columns]
    shutil.copytree(reference, resumed, ignore=shutil.ignore_patterns("model.safetensors"))
    for later in list_checkpoints(resumed)[1:]:  # resume from the earliest kept checkpoint
        shutil.rmtree(later)
    launch(torchrun(resumed, "--optimizer", "muon", "--resume", "true"))
    assert starts(resumed)[-1]["resumed_exactly"] is True
    assert train_losses(resumed) == train_losses(reference)
    after, uninterrupted = weights(resumed), weights(reference)
    assert [name for name in uninterrupted if not torch.equal(after[name], uninterrupted[name])] == []
