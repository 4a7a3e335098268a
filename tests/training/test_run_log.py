"""The run log (JSON lines, truncated on resume), TensorBoard optional, only the main process writes, the train meter
weighs every token.
"""

from __future__ import annotations

import math
import sys

import torch

from hfzoo.training.logging import RunLogger, read_log
from hfzoo.training.loop import TrainMeter


def test_run_log_records_and_resume_truncation(tmp_path):
    log = RunLogger(tmp_path, enabled=True, max_steps=4, tensorboard=True)
    log.write("start", step=0, num_processes=1)
    for step in (1, 2, 3):
        log.train(step, loss=5.0 - step, lr=1e-3, grad_norm=1.0, tokens_per_s=100.0, tokens_seen=64 * step)
    log.write("eval", step=2, eval_loss=3.5, perplexity=math.exp(3.5))
    log.close()
    assert list((tmp_path / "tensorboard").glob("events.out.tfevents.*"))
    with open(tmp_path / "log.jsonl", "a") as f:
        f.write('{"event": "train", "step": 4, "lo')  # a record cut off by a kill

    resumed = RunLogger(tmp_path, enabled=True, max_steps=4, start_step=2, tensorboard=False)
    resumed.write("start", step=2)
    resumed.close()
    records = read_log(tmp_path)
    assert [(r["event"], r["step"]) for r in records] == [
        ("start", 0),
        ("train", 1),
        ("train", 2),
        ("eval", 2),
        ("start", 2),
    ]
    assert {"step", "loss", "lr", "tokens_per_s", "tokens_seen", "elapsed"} <= records[1].keys()


def test_tensorboard_missing_is_skipped_cleanly(tmp_path, monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)  # `import` now raises ImportError
    log = RunLogger(tmp_path, enabled=True, max_steps=1, tensorboard=True)
    log.train(1, loss=2.0, lr=1e-3, grad_norm=None, tokens_per_s=10.0, tokens_seen=8)
    log.close()
    assert "tensorboard is not installed" in caplog.text
    assert not (tmp_path / "tensorboard").exists()
    assert read_log(tmp_path)[0]["loss"] == 2.0


def test_logger_of_a_non_main_process_writes_nothing(tmp_path):
    log = RunLogger(tmp_path / "rank1", enabled=False, max_steps=1)
    log.write("start", step=0)
    log.close()
    assert not (tmp_path / "rank1").exists()


def test_train_meter_reports_mean_loss_and_all_tokens(accelerator):
    meter = TrainMeter(accelerator)
    meter.add(torch.tensor(2.0), torch.tensor(10))
    meter.add(torch.tensor(4.0), torch.tensor(30))
    saved = meter.state()
    resumed = TrainMeter(accelerator)
    resumed.load_state(saved)
    for m in (meter, resumed):
        loss, tokens, tokens_per_s = m.report()
        assert (loss, tokens) == (3.0, 40) and tokens_per_s > 0
    assert meter.report()[:2] == (0.0, 0)
