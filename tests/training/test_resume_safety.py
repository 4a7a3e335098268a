"""Checkpoints hold no code and resume exactly or not at all (issue 17 items 1-3), piece by piece with a real
Accelerator, a real model, optimizer and LR scheduler; the recipe's resume is tested in test_pretrain_recipe.py.

A checkpoint folder holds safetensors and JSON only; a pickle planted in it is never opened. Its manifest lists
every file with size and SHA-256: a missing, truncated or altered file is refused by name. Saving a step again never
leaves a half-deleted folder. A resumed config may change only the keys that keep the run exact.
"""

from __future__ import annotations

import json
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from tests.helpers.pickles import CreatesMarker

from hfzoo.training import checkpointing
from hfzoo.training.checkpointing import (
    CheckpointError,
    Progress,
    check_resumed_config,
    latest_checkpoint,
    load_checkpoint,
    save_checkpoint,
    verify_checkpoint,
)
from hfzoo.training.loop import build_scheduler

CONFIG = {"preset": "gpt-tiny", "seed": 11, "per_device_batch_size": 8, "max_steps": 20, "log_every": 1}


class Run:
    """A tiny training run: model, AdamW, LR scheduler (registered for checkpoints), collator generator."""

    def __init__(self, accelerator: Accelerator, seed: int = 0):
        torch.manual_seed(seed)
        model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 3))
        optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
        self.scheduler = build_scheduler(optimizer, 2, 10, 0.1)
        self.model, self.optimizer = accelerator.prepare(model, optimizer)
        accelerator.register_for_checkpointing(self.scheduler)
        self.generator = torch.Generator().manual_seed(5)

    def step(self) -> None:
        """A step that draws from every random stream a resumed run must continue."""
        inputs = torch.randn(2, 4) + torch.rand(4, generator=self.generator)
        self.model(inputs).pow(2).mean().backward()
        self.optimizer.step()
        self.scheduler.step()
        self.optimizer.zero_grad()

    def state(self) -> list[torch.Tensor]:
        return [p.detach().clone() for p in self.model.parameters()]


def _saved(accelerator: Accelerator, tmp_path: Path) -> tuple[Run, Path, list[torch.Tensor]]:
    """A run saved at step 2, and its weights after two more steps (what a resume must reproduce)."""
    run = Run(accelerator)
    run.step(), run.step()
    path = save_checkpoint(accelerator, tmp_path, Progress(step=2), run.generator, keep=2, config=CONFIG)
    run.step(), run.step()
    return run, path, run.state()


def _resume_and_continue(accelerator: Accelerator, run: Run, path: Path) -> list[torch.Tensor]:
    run.step()  # move away first: the load must restore everything
    assert load_checkpoint(accelerator, path, run.generator).step == 2
    run.step(), run.step()
    return run.state()


def test_a_checkpoint_is_safetensors_and_json_and_a_planted_pickle_is_never_loaded(accelerator, tmp_path):
    run, path, expected = _saved(accelerator, tmp_path)
    assert {f.suffix for f in path.iterdir()} == {".safetensors", ".json"}
    pickle.loads(pickle.dumps(CreatesMarker(tmp_path / "live")))  # the payload does run when unpickled
    assert (tmp_path / "live").exists()
    marker = tmp_path / "code-ran"
    for name in ("custom_checkpoint_0.pkl", "random_states_0.pkl", "optimizer.bin", "collator_rng_0.pt"):
        (path / name).write_bytes(pickle.dumps(CreatesMarker(marker)))
    resumed = _resume_and_continue(accelerator, run, path)
    assert not marker.exists()
    assert all(torch.equal(a, b) for a, b in zip(resumed, expected, strict=True))  # exact: dropout, LR, moments


@pytest.mark.parametrize(
    ("name", "damage", "what"),
    [
        ("rng_0.safetensors", "delete", "is missing"),
        ("rng_0.json", "truncate", "is truncated or altered"),
        ("optimizer.safetensors", "flip", "is altered"),
        ("registered_0.json", "flip", "is altered"),
    ],
)
def test_a_damaged_file_is_refused_by_name(accelerator, tmp_path, name, damage, what):
    run, path, _ = _saved(accelerator, tmp_path)
    file = path / name
    data = file.read_bytes()
    if damage == "delete":
        file.unlink()
    elif damage == "truncate":
        file.write_bytes(data[: len(data) // 2])
    else:
        file.write_bytes(data[:-2] + bytes([data[-2] ^ 1]) + data[-1:])
    with pytest.raises(CheckpointError, match=rf"{name} {what}.*resume from another checkpoint"):
        load_checkpoint(accelerator, path, run.generator)
    with pytest.raises(CheckpointError, match=name):
        check_resumed_config(path, CONFIG)


def test_saving_a_step_again_never_leaves_a_half_deleted_checkpoint(accelerator, tmp_path, monkeypatch):
    """A crash while the older copy of the step is being removed: the published step-N is always complete."""
    run, path, _ = _saved(accelerator, tmp_path)
    real_rmtree = shutil.rmtree

    def crash_midway(folder, *args, **kwargs):
        next(p for p in Path(folder).iterdir() if p.is_file()).unlink()  # one file gone, then the crash
        raise OSError("killed while deleting")

    monkeypatch.setattr(checkpointing.shutil, "rmtree", crash_midway)
    with pytest.raises(OSError, match="killed while deleting"):
        save_checkpoint(accelerator, tmp_path, Progress(step=2), run.generator, keep=2, config=CONFIG)
    monkeypatch.setattr(checkpointing.shutil, "rmtree", real_rmtree)
    assert latest_checkpoint(tmp_path) == path
    verify_checkpoint(path)  # complete: the new copy, published whole


def test_a_changed_config_is_refused_naming_the_key(accelerator, tmp_path):
    _, path, _ = _saved(accelerator, tmp_path)
    for key, value in (("seed", 5), ("per_device_batch_size", 4), ("preset", "llama-tiny")):
        with pytest.raises(CheckpointError, match=rf"'{key}' was {CONFIG[key]!r}, now {value!r}.*max_steps"):
            check_resumed_config(path, CONFIG | {key: value})
    # Run length and logging may change: they do not change what the steps up to the checkpoint computed.
    assert check_resumed_config(path, CONFIG | {"max_steps": 40, "log_every": 5}).step == 2
    assert json.loads((path / "run_config.json").read_text()) == CONFIG


def test_a_checkpoint_saved_before_a_key_existed_resumes_with_its_default(accelerator, tmp_path):
    """CONFIG has no lr_schedule or decay_fraction, as a checkpoint written before issue 36 added them."""
    _, path, _ = _saved(accelerator, tmp_path)
    assert check_resumed_config(path, CONFIG | {"lr_schedule": "cosine", "decay_fraction": 0.2}).step == 2
    with pytest.raises(CheckpointError, match=r"'lr_schedule' was 'cosine', now 'wsd'"):
        check_resumed_config(path, CONFIG | {"lr_schedule": "wsd", "decay_fraction": 0.2})
