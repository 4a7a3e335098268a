"""The result grid in calls of limited length (model_cards/grid_runs.py): an invocation stopped by its budget leaves
its finished runs complete and the run it interrupted continuable; the same command again keeps the finished runs,
continues the interrupted one from its checkpoint to the numbers an uninterrupted run reaches, and the card says
which device the runs trained on. Tiny recorded runs of the real recipes, as in test_result_cards.py."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import generate_finetune_results as results  # model_cards/ is on the path (tests/cards/conftest.py)
import grid_runs  # noqa: E402  (model_cards/ is on the path once test_result_cards is imported)
import pytest
from recording import Budget, run_complete  # noqa: E402
from tests.helpers.paths import REPO

from hfzoo.training.logging import read_log


def stop_when(path: Path, budget: Budget) -> threading.Thread:
    """Stop `budget` as soon as `path` exists, as a SIGTERM to the generator would (from a watching thread)."""

    def watch() -> None:
        deadline = time.monotonic() + 600
        while not path.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        budget.stop()

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_spent_budget_starts_no_run_and_names_the_runs_left(checkpoints, tmp_path):
    execution = grid_runs.Execution(budget=Budget(minutes=0))
    assert results.run_grid(tmp_path / "runs", checkpoints["bert-tiny"], ["sst2", "rte"], ["lora"], native=False,
                            execution=execution) == 0  # fmt: skip
    assert execution.budget.left == ["sst2-lora", "rte-lora"]
    assert not (tmp_path / "runs").exists()
    assert grid_runs.exit_code(0, execution) == grid_runs.STOPPED_EXIT


def test_the_command_line_wires_the_budget_and_exits_75_with_runs_left(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(REPO)  # main() moves to the repository root; the test's cwd is restored after it
    with pytest.raises(SystemExit) as stopped:
        results.main(["run", str(tmp_path / "runs"), "--base", str(tmp_path / "base"), "--tasks", "sst2", "rte",
                      "--methods", "full", "--save_every", "50", "--max_minutes", "0"])  # fmt: skip
    assert stopped.value.code == grid_runs.STOPPED_EXIT == 75
    assert "2 runs left (sst2-full, rte-full): the same command continues them" in capsys.readouterr().out
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow  # tiny recorded runs, 45 s; the budget tests cover the runner
def test_interrupted_after_the_first_run_the_same_command_keeps_it_and_runs_the_rest(
    checkpoints, tmp_path, tiny_run_lengths, monkeypatch
):
    monkeypatch.chdir(REPO)
    runs, base = tmp_path / "runs", checkpoints["bert-tiny"]
    first = grid_runs.Execution(budget=Budget())
    watcher = stop_when(runs / "sst2-lora" / results.RUN_RECORD, first.budget)
    assert results.run_grid(runs, base, ["sst2", "rte"], ["lora"], native=False, execution=first) == 0
    watcher.join()
    assert first.budget.left == ["rte-lora"]
    assert run_complete(runs / "sst2-lora") and not run_complete(runs / "rte-lora")
    record = json.loads((runs / "sst2-lora" / results.RUN_RECORD).read_text())
    assert "--cpu true" in record["command"] and record["device"].endswith("(cpu)")
    results.card(runs, tmp_path / "card-before")  # the finished run only: the interrupted one is not in it
    before = json.loads((tmp_path / "card-before" / results.RESULTS).read_text())
    assert set(before["tasks"]) == {"sst2"}
    kept = (runs / "sst2-lora" / "metrics.json").stat().st_mtime_ns

    again = grid_runs.Execution()
    assert results.run_grid(runs, base, ["sst2", "rte"], ["lora"], native=False, execution=again) == 0
    assert again.budget.left == [] and grid_runs.exit_code(0, again) == 0
    assert (runs / "sst2-lora" / "metrics.json").stat().st_mtime_ns == kept  # not run again
    card = results.card(runs, tmp_path / "card")
    after = json.loads((tmp_path / "card" / results.RESULTS).read_text())
    assert after["tasks"]["sst2"] == before["tasks"]["sst2"] and set(after["tasks"]) == {"sst2", "rte"}
    assert after["device"] == record["device"]
    assert f"Device: {record['device']}." in card.read_text()


@pytest.mark.slow  # three tiny recorded runs of 40 steps with checkpoints: 150 s under load 14 on 2 cores
def test_a_run_stopped_mid_way_continues_from_its_checkpoint_to_the_uninterrupted_numbers(
    checkpoints, tmp_path, tiny_run_lengths, monkeypatch
):
    """The budget terminates a run after its first checkpoint; the same command continues it from its latest one
    (`--resume true`), and its metrics are those of the same run never interrupted, bit for bit."""
    monkeypatch.chdir(REPO)
    longer = {task: (config, [*length, "--max_steps", "40", "--max_train_samples", "64"])
              for task, (config, length) in results.TASKS.items()}  # fmt: skip
    monkeypatch.setattr(results, "TASKS", longer)
    runs, base = tmp_path / "runs", checkpoints["bert-tiny"]
    stopped = grid_runs.Execution(save_every=4, budget=Budget())
    stop_when(runs / "sst2-full" / "checkpoints" / "step-00000004" / "manifest.json", stopped.budget)
    assert results.run_grid(runs, base, ["sst2"], ["full"], native=False, execution=stopped) == 0
    assert stopped.budget.left == ["sst2-full"] and not run_complete(runs / "sst2-full")
    assert json.loads((runs / "sst2-full" / results.RUN_RECORD).read_text())["stopped"] is True

    continued = grid_runs.Execution(save_every=4)
    assert results.run_grid(runs, base, ["sst2"], ["full"], native=False, execution=continued) == 0
    assert run_complete(runs / "sst2-full") and not (runs / "sst2-full" / "checkpoints").exists()
    starts = [r for r in read_log(runs / "sst2-full") if r["event"] == "start"]
    assert starts[-1]["resumed_from"] is not None
    record = json.loads((runs / "sst2-full" / results.RUN_RECORD).read_text())
    assert [s["stopped"] for s in record["segments"]] == [True, False]
    assert "--resume" not in record["command"]  # the command that started the run, which an uninterrupted run ran

    whole = tmp_path / "uninterrupted"
    assert results.run_grid(whole, base, ["sst2"], ["full"], native=False,
                            execution=grid_runs.Execution(save_every=4)) == 0  # fmt: skip
    resumed, uninterrupted = (json.loads((folder / "sst2-full" / "metrics.json").read_text())
                              for folder in (runs, whole))  # fmt: skip
    assert resumed["steps"] == 40 and resumed == uninterrupted  # every metric, to the last digit


def test_device_cuda_without_cuda_is_refused_in_one_line_before_any_run(tmp_path, monkeypatch):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA: the refusal is for machines without it")
    monkeypatch.chdir(REPO)
    with pytest.raises(SystemExit) as refused:
        results.main(["run", str(tmp_path / "runs"), "--base", "bert-tiny", "--tasks", "sst2", "--device", "cuda"])
    message = str(refused.value.code)
    assert "--device cuda" in message and "no CUDA device" in message and "\n" not in message
    assert not (tmp_path / "runs").exists()


def test_a_runs_folder_of_one_device_refuses_another(tmp_path):
    """A card is of one device, and a run's checkpoint resumes only on its own (the recipe's `cpu` key)."""
    run_dir = tmp_path / "runs" / "sst2-full"
    run_dir.mkdir(parents=True)
    (run_dir / results.RUN_RECORD).write_text(json.dumps({"device": "NVIDIA H100 80GB HBM3 (cuda)"}))
    with pytest.raises(SystemExit, match=r"--device cpu: sst2-full ran on NVIDIA H100 80GB HBM3 \(cuda\)"):
        grid_runs.check_runs_device(tmp_path / "runs", "cpu")
