"""Atomic checkpoints: the latest kept, everything restored, an interrupted save never valid, a fresh start over old
checkpoints refused. Real Accelerator, real optimizer state.
"""

from __future__ import annotations

import pytest
import torch

from hfzoo.training import checkpointing, latest_checkpoint, list_checkpoints
from hfzoo.training.checkpointing import Progress, checkpoint_to_resume, load_checkpoint, save_checkpoint


def _tiny_training_state(accelerator, seed=0):
    torch.manual_seed(seed)
    model = torch.nn.Linear(4, 3)
    optimizer = torch.optim.AdamW(model.parameters(), lr=0.1)
    model, optimizer = accelerator.prepare(model, optimizer)
    return model, optimizer


def _train_step(model, optimizer):
    model(torch.randn(2, 4)).pow(2).mean().backward()
    optimizer.step()
    optimizer.zero_grad()


def test_checkpoints_keep_the_latest_and_restore_everything(accelerator, tmp_path):
    model, optimizer = _tiny_training_state(accelerator)
    generator = torch.Generator().manual_seed(5)
    for step in (1, 2, 3):
        _train_step(model, optimizer)
        torch.rand(3, generator=generator)
        save_checkpoint(
            accelerator, tmp_path, Progress(step=step, epoch=1, batches_in_epoch=step * 2), generator, keep=2
        )
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000002", "step-00000003"]
    expected_weight, expected_draw = model.weight.detach().clone(), torch.rand(3, generator=generator)

    _train_step(model, optimizer)  # move away, then restore
    restored_generator = torch.Generator().manual_seed(0)
    progress = load_checkpoint(accelerator, latest_checkpoint(tmp_path), restored_generator)
    assert (progress.step, progress.epoch, progress.batches_in_epoch) == (3, 1, 6)
    assert torch.equal(model.weight, expected_weight)
    assert torch.equal(torch.rand(3, generator=restored_generator), expected_draw)


def test_a_save_interrupted_before_publishing_is_never_a_valid_checkpoint(accelerator, tmp_path, monkeypatch):
    model, optimizer = _tiny_training_state(accelerator)
    generator = torch.Generator()
    save_checkpoint(accelerator, tmp_path, Progress(step=1), generator, keep=3)
    weights_at_1 = model.weight.detach().clone()
    _train_step(model, optimizer)

    def crash(src, dst):
        raise OSError("killed mid-save")

    monkeypatch.setattr(checkpointing.os, "replace", crash)
    with pytest.raises(OSError, match="killed mid-save"):
        save_checkpoint(accelerator, tmp_path, Progress(step=2), generator, keep=3)
    monkeypatch.undo()
    partial = tmp_path / "checkpoints" / ".tmp-step-00000002"
    assert (partial / "model.safetensors").is_file() and (partial / "progress.json").is_file()
    assert latest_checkpoint(tmp_path).name == "step-00000001"
    assert checkpoint_to_resume(tmp_path, True).name == "step-00000001"
    with pytest.raises(FileNotFoundError, match="not a complete checkpoint"):
        checkpoint_to_resume(tmp_path, str(tmp_path / "checkpoints" / "missing"))

    assert load_checkpoint(accelerator, latest_checkpoint(tmp_path), generator).step == 1
    assert torch.equal(model.weight, weights_at_1)
    save_checkpoint(accelerator, tmp_path, Progress(step=2), generator, keep=3)  # the next save clears the debris
    assert not partial.exists()
    assert [p.name for p in list_checkpoints(tmp_path)] == ["step-00000001", "step-00000002"]


def test_starting_fresh_over_existing_checkpoints_is_refused(accelerator, tmp_path):
    assert checkpoint_to_resume(tmp_path, False) is None and checkpoint_to_resume(tmp_path, True) is None
    model, _ = _tiny_training_state(accelerator)
    save_checkpoint(accelerator, tmp_path, Progress(step=4), torch.Generator(), keep=1)
    with pytest.raises(FileExistsError, match="already holds checkpoints .*step-00000004.*pass --resume"):
        checkpoint_to_resume(tmp_path, False)
