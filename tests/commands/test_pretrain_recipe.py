"""The pretraining recipe end to end, as users run it.

One reference run (in-process, through `hfzoo.commands.pretrain.main`, the function `hfzoo pretrain` calls)
is compared with: `python recipes/pretrain.py` killed by SIGKILL and resumed; a run whose checkpoint
rename crashed mid-save and was resumed; and the same training as two real DDP processes (`accelerate
launch` with recipes/configs/accelerate/cpu_ddp.yaml, gloo). All on gpt-tiny with
recipes/configs/test-gpt-tiny-clm.yaml: shuffling, dropout 0.1 and gradient accumulation 2 on, 8 optimizer
steps per epoch, so runs cross epoch boundaries.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from tests.helpers.pickles import CreatesMarker
from tests.helpers.recipe_runs import recipe_env, run_pretrain as run_in_process
from tests.helpers.run_outputs import max_weight_difference, train_losses
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

from hfzoo.card_writing import LOSS_CURVE
from hfzoo.data.corpus import load_corpus
from hfzoo.data.packing import pack
from hfzoo.training import checkpointing, list_checkpoints
from hfzoo.training.logging import read_log

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "pretrain.py"
CONFIG = REPO / "recipes" / "configs" / "test-gpt-tiny-clm.yaml"
ACCELERATE_CPU_DDP = REPO / "recipes" / "configs" / "accelerate" / "cpu_ddp.yaml"
BIN = Path(sys.executable).parent
NO_DROPOUT = ["--model.hidden_dropout", "0", "--model.attention_dropout", "0"]


@pytest.fixture(scope="module")
def reference(tmp_path_factory) -> Path:
    """An uninterrupted run of the test config (20 steps, checkpoints every 4)."""
    return run_in_process("--output_dir", str(tmp_path_factory.mktemp("reference")))


def test_output_folder_has_model_tokenizer_card_and_logs(reference):
    for name in ("model.safetensors", "config.json", "tokenizer.json", "README.md", LOSS_CURVE, "log.jsonl"):
        assert (reference / name).is_file(), name
    assert (reference / LOSS_CURVE).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    records = read_log(reference)
    train = [r for r in records if r["event"] == "train"]
    assert [r["step"] for r in train] == list(range(1, 21))
    assert {"step", "loss", "lr", "tokens_per_s", "elapsed"} <= train[0].keys()
    assert train[-1]["loss"] < train[0]["loss"] - 0.5  # it learns
    assert [r["step"] for r in records if r["event"] == "eval"] == [10, 20]
    assert [r["step"] for r in records if r["event"] == "checkpoint"] == [4, 8, 12, 16]
    # keep_checkpoints: 2, the last step's among them (taken after the outputs, so not in the log)
    assert [p.name for p in list_checkpoints(reference)] == ["step-00000016", "step-00000020"]


def test_saved_model_reloads_with_auto_classes_and_reproduces_the_logged_eval_loss(reference):
    model = AutoModelForCausalLM.from_pretrained(reference).eval()
    tokenizer = AutoTokenizer.from_pretrained(reference)
    # Rebuild the validation blocks as the recipe did and recompute the loss it logged at the end.
    texts = load_corpus(split="validation", seed=11).select(range(10))
    blocks = torch.tensor(pack(texts, tokenizer, 32)["input_ids"])
    with torch.no_grad():
        losses = [(model(input_ids=b, labels=b).loss.item(), b[:, 1:].numel()) for b in blocks.split(4)]
    loss = sum(mean * n for mean, n in losses) / sum(n for _, n in losses)
    final_eval = [r for r in read_log(reference) if r["event"] == "eval"][-1]
    assert loss == pytest.approx(final_eval["eval_loss"], abs=1e-5)
    assert final_eval["perplexity"] == pytest.approx(math.exp(loss), rel=1e-5)


def test_model_card_is_generated_from_the_run(reference):
    card = (reference / "README.md").read_text()
    metadata = yaml.safe_load(card.split("---\n")[1])
    hub = ModelCard.load(reference / "README.md").data  # as the Hub reads it: the default corpus is on no Hub
    assert hub.library_name == "transformers" and hub.datasets is None and hub.base_model is None
    assert hub.eval_results[0].dataset_type == "hfzoo-default-corpus"
    assert metadata["pipeline_tag"] == "text-generation"
    assert {"hfzoo", "gpt-tiny", "clm"} <= set(metadata["tags"])
    final_eval = [r for r in read_log(reference) if r["event"] == "eval"][-1]
    metrics = {m["type"]: m["value"] for m in metadata["model-index"][0]["results"][0]["metrics"]}
    assert metrics["perplexity"] == pytest.approx(final_eval["perplexity"], abs=1e-4)
    config = json.loads((reference / "config.json").read_text())
    assert f"| hidden_size | {config['hidden_size']} |" in card
    assert f"| vocab_size | {config['vocab_size']} |" in card
    assert "trust_remote_code=True" in card and "AutoModelForCausalLM" in card
    assert f"![loss curve]({LOSS_CURVE})" in card


def test_sigkill_then_resume_gives_identical_weights(reference, tmp_path):
    out = tmp_path / "killed"
    with open(tmp_path / "killed.log", "w") as log:
        process = subprocess.Popen(
            [sys.executable, str(RECIPE), "--config", str(CONFIG), "--output_dir", str(out)],
            env=recipe_env(),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + 120
        while not list_checkpoints(out) and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.005)
        os.kill(process.pid, signal.SIGKILL)
        process.wait()
    assert process.returncode == -signal.SIGKILL, (tmp_path / "killed.log").read_text()[-3000:]
    assert not (out / "model.safetensors").exists(), "the run finished before it was killed"
    killed_at = max(r["step"] for r in read_log(out) if r["event"] == "train")
    assert (out / "tokenizer.json").read_text() == (reference / "tokenizer.json").read_text()

    resume = [sys.executable, str(RECIPE), "--config", str(CONFIG), "--output_dir", str(out), "--resume"]
    resumed = subprocess.run(resume, env=recipe_env(), capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    start = [r for r in read_log(out) if r["event"] == "start"][-1]
    assert start["resumed_from"] is not None and start["step"] >= 4
    print(f"killed after step {killed_at}; resumed from step {start['step']}")
    assert max_weight_difference(out, reference) <= 1e-6
    assert train_losses(out) == train_losses(reference)  # one record per step, each as uninterrupted


def test_crash_during_checkpoint_rename_leaves_a_partial_checkpoint_that_resume_ignores(
    reference, tmp_path, monkeypatch
):
    out = tmp_path / "crashed"
    real_replace = os.replace

    def crash_on_step_8(src, dst):
        if Path(dst).name == "step-00000008":
            raise OSError("simulated crash while publishing the checkpoint")
        return real_replace(src, dst)

    monkeypatch.setattr(checkpointing.os, "replace", crash_on_step_8)
    with pytest.raises(OSError, match="simulated crash"):
        run_in_process("--output_dir", str(out))
    monkeypatch.setattr(checkpointing.os, "replace", real_replace)
    partial = out / "checkpoints" / ".tmp-step-00000008"
    assert partial.is_dir() and (partial / "model.safetensors").is_file()  # written, never published
    assert [p.name for p in list_checkpoints(out)] == ["step-00000004"]

    run_in_process("--output_dir", str(out), "--resume")
    start = [r for r in read_log(out) if r["event"] == "start"][-1]
    assert start["step"] == 4 and start["resumed_from"].endswith("step-00000004")
    assert not partial.exists()  # cleaned up by the next save
    assert max_weight_difference(out, reference) <= 1e-6


def _copy_of(reference: Path, tmp_path: Path) -> Path:
    """The finished reference run without its last step's checkpoint (step 20; step 16 is kept), as a run killed
    after step 16 would leave it, to resume without touching the original."""
    out = Path(shutil.copytree(reference, tmp_path / "run"))
    shutil.rmtree(out / "checkpoints" / "step-00000020")
    return out


def test_muon_with_the_wsd_schedule_resumes_bit_exactly(tmp_path):
    """Muon's momentum, AdamW's moments (embeddings, head, norms, biases) and the schedule's stable-to-decay turn
    (step 16 of 20) all come back from a checkpoint: resumed from step 8, the run ends on the same bits."""
    speedrun = ["--optimizer", "muon", "--lr_schedule", "wsd", "--keep_checkpoints", "5"]
    reference = run_in_process("--output_dir", str(tmp_path / "reference"), *speedrun)
    out = Path(shutil.copytree(reference, tmp_path / "run"))
    for step in (12, 16, 20):
        shutil.rmtree(out / "checkpoints" / f"step-{step:08d}")
    run_in_process("--output_dir", str(out), *speedrun, "--resume")
    assert [r["step"] for r in read_log(out) if r["event"] == "start"] == [0, 8]
    assert max_weight_difference(out, reference) == 0.0
    assert train_losses(out) == train_losses(reference)
    lrs = [r["lr"] for r in read_log(reference) if r["event"] == "train"]
    assert lrs[3:16] == [lrs[3]] * 13 and lrs[16] < lrs[15]  # warmup 3, stable, decay over the last 4 steps


def test_a_new_run_into_a_finished_runs_folder_is_refused_unless_overwrite(reference, tmp_path):
    """Without checkpoints to resume, a new run silently replaced a finished run's model, log and card."""
    out = _copy_of(reference, tmp_path)
    shutil.rmtree(out / "checkpoints")
    record = {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()}
    refused = rf"the output folder {out} is not empty .*--overwrite_output_dir"
    with pytest.raises(FileExistsError, match=refused):
        run_in_process("--output_dir", str(out), "--max_steps", "2")
    assert {p.relative_to(out): p.read_bytes() for p in out.rglob("*") if p.is_file()} == record
    (out / "notes.txt").write_text("mine")
    run_in_process("--output_dir", str(out), "--max_steps", "2", "--eval_every", "2", "--overwrite_output_dir", "true")
    assert (out / "notes.txt").read_text() == "mine" and read_log(out)[-1]["step"] == 2


def test_resume_never_loads_a_planted_pickle_and_stays_exact(reference, tmp_path):
    """accelerate reloaded `custom_checkpoint_0.pkl` (the scheduler) with pickle: a crafted one ran code on resume."""
    out, marker = _copy_of(reference, tmp_path), tmp_path / "code-ran"
    step_16 = out / "checkpoints" / "step-00000016"
    for name in ("custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin", "collator_rng_0.pt"):
        (step_16 / name).write_bytes(pickle.dumps(CreatesMarker(marker)))
    (out / "model.safetensors").unlink()
    run_in_process("--output_dir", str(out), "--resume")
    assert not marker.exists()
    assert [r["step"] for r in read_log(out) if r["event"] == "start"] == [0, 16]
    assert max_weight_difference(out, reference) == 0.0
    assert train_losses(out) == train_losses(reference)


def test_resume_refuses_a_missing_rng_file_naming_it(reference, tmp_path):
    """Without the RNG states the resumed run was silently inexact (max abs diff 1.7e-3, exit 0)."""
    out = _copy_of(reference, tmp_path)
    rng = next((out / "checkpoints" / "step-00000016").glob("r*_0.*"))  # this version: rng_0.safetensors
    rng.unlink()
    with pytest.raises(SystemExit, match=rf"{rng.name} is missing.*cannot resume the run exactly"):
        run_in_process("--output_dir", str(out), "--resume")


@pytest.mark.parametrize(
    "change", [("--per_device_batch_size", "2"), ("--seed", "5"), ("--preset", "llama-tiny")], ids=lambda c: c[0]
)
def test_resume_refuses_a_changed_config_naming_the_key(reference, tmp_path, change):
    out = _copy_of(reference, tmp_path)
    model = (out / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match=rf"'{change[0][2:]}' was .*, now .*{change[1]}"):
        run_in_process("--output_dir", str(out), "--resume", *change)
    assert (out / "model.safetensors").read_bytes() == model


def test_resume_with_max_steps_already_reached_has_nothing_to_do(reference, tmp_path, caplog):
    out = _copy_of(reference, tmp_path)
    model, log = (out / "model.safetensors").read_bytes(), (out / "log.jsonl").read_text()
    assert run_in_process("--output_dir", str(out), "--resume", "--max_steps", "16") == out
    assert "nothing to do" in caplog.text
    assert (out / "model.safetensors").read_bytes() == model and (out / "log.jsonl").read_text() == log


def test_resume_continues_the_masking_collators_random_stream(tmp_path, monkeypatch):
    """MLM draws its masks from the collator's generator: a resumed run must mask what the uninterrupted one did."""
    mlm = ["--preset", "bert-tiny", "--objective", "mlm", "--max_steps", "8", "--save_every", "3", "--eval_every", "8"]
    reference_mlm = run_in_process("--output_dir", str(tmp_path / "reference"), *mlm)
    real_replace = os.replace
    monkeypatch.setattr(
        checkpointing.os,
        "replace",
        lambda src, dst: _raise() if Path(dst).name == "step-00000006" else real_replace(src, dst),
    )
    with pytest.raises(OSError):
        run_in_process("--output_dir", str(tmp_path / "run"), *mlm)
    monkeypatch.setattr(checkpointing.os, "replace", real_replace)
    resumed = run_in_process("--output_dir", str(tmp_path / "run"), *mlm, "--resume")
    assert [r["step"] for r in read_log(resumed) if r["event"] == "start"] == [0, 3]
    assert max_weight_difference(resumed, reference_mlm) <= 1e-6
    assert train_losses(resumed) == train_losses(reference_mlm)


def _raise():
    raise OSError("simulated crash while publishing the checkpoint")


@pytest.mark.slow  # two launches (~35 s); make test runs two processes sharded (tests/training/test_fsdp.py)
def test_two_ddp_processes_match_one_process_with_the_same_global_batch(tmp_path):
    """`accelerate launch` with the ready CPU config starts two real processes; the recipe puts them on gloo.

    Tolerance: both runs see the same 8 blocks per micro-batch and average the same per-token losses;
    only the order of float32 additions differs (DDP all-reduces two half-batch gradient sums), which
    moves the loss by ~1e-6 over these steps; 1e-4 leaves room without hiding a wrong batch (one
    different block changes the loss by >1e-2).
    """
    steps = ["--max_steps", "8", "--save_every", "100", "--eval_every", "8", *NO_DROPOUT]
    ddp = tmp_path / "ddp"
    launch = [str(BIN / "accelerate"), "launch", "--config_file", str(ACCELERATE_CPU_DDP)]
    recipe = [str(RECIPE), "--config", str(CONFIG), "--output_dir", str(ddp), "--per_device_batch_size", "2", *steps]
    result = subprocess.run([*launch, *recipe], env=recipe_env(threads=1), capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-3000:]
    single = run_in_process("--output_dir", str(tmp_path / "single"), "--per_device_batch_size", "4", *steps)

    records = read_log(ddp)
    start, end = records[0], records[-1]
    assert (start["num_processes"], start["distributed_type"], start["global_batch_size"]) == (2, "MULTI_CPU", 8)
    checksums = end["parameter_checksums"]
    assert len(checksums) == 2 and checksums[0] == checksums[1]  # both ranks hold identical weights
    ddp_losses, single_losses = train_losses(ddp), train_losses(single)
    assert list(ddp_losses) == list(single_losses) == list(range(1, 9))  # crosses an epoch boundary
    for step in ddp_losses:
        assert ddp_losses[step] == pytest.approx(single_losses[step], abs=1e-4), step
    assert end["eval_loss"] == pytest.approx(read_log(single)[-1]["eval_loss"], abs=1e-4)


@pytest.mark.parametrize(
    ("preset", "objective", "auto_class", "pipeline_tag"),
    [
        ("bert-tiny", "mlm", AutoModelForMaskedLM, "fill-mask"),
        ("bart-tiny", "denoising", AutoModelForSeq2SeqLM, "text2text-generation"),
        ("t5-tiny", "span_corruption", AutoModelForSeq2SeqLM, "text2text-generation"),
    ],
)
def test_other_objectives_train_and_reload_with_their_auto_class(
    tmp_path, monkeypatch, preset, objective, auto_class, pipeline_tag
):
    out = run_in_process(
        "--output_dir",
        str(tmp_path),
        "--preset",
        preset,
        "--objective",
        objective,
        "--max_steps",
        "2",
        "--eval_every",
        "2",
    )
    model = auto_class.from_pretrained(out)
    assert type(model).__module__.startswith("hfzoo.models")
    assert AutoTokenizer.from_pretrained(out).mask_token is not None
    final_eval = read_log(out)[-1]
    assert final_eval["eval_targets"] > 0 and math.isfinite(final_eval["eval_loss"])
    card = (out / "README.md").read_text()
    assert yaml.safe_load(card.split("---\n")[1])["pipeline_tag"] == pipeline_tag
    monkeypatch.chdir(out.parent)  # the card's code runs as written, beside the run folder (no text2text pipeline)
    exec(card.split("```python\n")[1].split("```")[0], {})
