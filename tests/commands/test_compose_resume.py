"""Composition checkpoints, exact resume, the best composition and evaluation-only runs (issue 17 item 4).

The two trained task adapters and the bert-tiny base of test_compose_recipe.py. A soft router (learned) is trained
by `python recipes/compose.py`, killed by SIGKILL at a random step after its first checkpoint and resumed: its router
and head weights must be bit-identical to an uninterrupted run's. With its average baseline, a run that crashes while
publishing a checkpoint resumes both runs exactly; a saved composition evaluates without training.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from tests.helpers.composition_args import compose_args
from tests.helpers.recipe_runs import kill_at_a_random_step, run_recipe
from tests.helpers.run_outputs import assert_same_tensors, read_run, replace_with_other_weights, train_losses

from hfzoo.commands import compose as recipe
from hfzoo.training import checkpointing, list_checkpoints
from hfzoo.training.logging import read_log

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "compose.py"
WEIGHTS = Path("composition") / "composition.safetensors"
SOFT = ["--strategy", "soft", "--strategy_options", "{granularity: sequence}", "--max_steps", "16", "--save_every",
        "3", "--eval_every", "4", "--save_best", "true", "--learning_rate", "1e-2"]  # fmt: skip


def soft_args(setup: dict[str, Path], output_dir: Path, *extra: str) -> list[str]:
    return [str(a) for a in compose_args(setup, output_dir, *SOFT, "--baseline", "false", *extra)]


@pytest.fixture(scope="module")
def reference(setup, tmp_path_factory) -> Path:
    """An uninterrupted soft-router run without its baseline."""
    return run_recipe(recipe.main, *soft_args(setup, tmp_path_factory.mktemp("compose-reference") / "soft"))


@pytest.mark.slow  # a killed launch, 30 s; the crash while checkpointing below resumes exactly
def test_sigkill_then_resume_gives_bit_identical_router_head_and_best(setup, reference, tmp_path):
    out = tmp_path / "killed"
    command = [sys.executable, str(RECIPE), *soft_args(setup, out)]
    target = kill_at_a_random_step(command, out, tmp_path / "log", max_steps=16)  # SOFT's
    assert not (out / "metrics.json").exists(), "the run finished before it was killed"
    assert list_checkpoints(out), "killed before its first checkpoint"

    run_recipe(recipe.main, *soft_args(setup, out, "--resume", "true"))
    start = [r for r in read_log(out) if r["event"] == "start"][-1]
    print(f"killed at step {target}, resumed from step {start['step']}")
    assert start["resumed_from"] is not None
    assert_same_tensors(out / WEIGHTS, reference / WEIGHTS)
    assert train_losses(out) == train_losses(reference)
    (metrics, predictions), (expected, expected_predictions) = read_run(out), read_run(reference)
    assert metrics["best"] == expected["best"] and predictions == expected_predictions
    assert metrics["reload_check"] == {"parameters_equal": True, "predictions_equal": True}
    assert_same_tensors(out / "best" / WEIGHTS, reference / "best" / WEIGHTS)


def test_the_best_composition_is_the_best_evaluations(reference):
    evaluations = [r for r in read_log(reference) if r["event"] == "eval"]
    top = max(r["accuracy"] for r in evaluations)
    best = read_run(reference)[0]["best"]
    assert best["step"] == next(r["step"] for r in evaluations if r["accuracy"] == top) and best["score"] == top
    assert (reference / "best" / "composition" / "composition.json").is_file()


def test_a_crash_while_checkpointing_resumes_baseline_and_composition_exactly(
    setup, tmp_path, monkeypatch
):
    """The learned run crashes publishing its step-6 checkpoint, after its baseline finished; `--resume` continues
    both (each from its own checkpoints) to what an uninterrupted run with its baseline gives."""
    quick = ["--max_steps", "8", "--save_best", "false"]
    expected = run_recipe(recipe.main, *compose_args(setup, tmp_path / "reference", *SOFT, *quick))
    out, real_replace = tmp_path / "run", os.replace

    def crash_in_the_learned_run(src, dst):
        if Path(dst).name == "step-00000006" and "average-baseline" not in str(dst):
            raise OSError("simulated crash while publishing the checkpoint")
        return real_replace(src, dst)

    monkeypatch.setattr(checkpointing.os, "replace", crash_in_the_learned_run)
    with pytest.raises(OSError, match="simulated crash"):
        run_recipe(recipe.main, *compose_args(setup, out, *SOFT, *quick))
    monkeypatch.setattr(checkpointing.os, "replace", real_replace)
    assert [p.name for p in list_checkpoints(out)] == ["step-00000003"]

    run_recipe(recipe.main, *compose_args(setup, out, *SOFT, *quick, "--resume", "true"))
    assert [r["step"] for r in read_log(out) if r["event"] == "start"] == [0, 3]
    assert_same_tensors(out / WEIGHTS, expected / WEIGHTS)
    baseline = Path("average-baseline") / WEIGHTS
    assert_same_tensors(out / baseline, expected / baseline)
    assert read_run(out)[0]["baselines"] == read_run(expected)[0]["baselines"]


def test_resume_refuses_another_strategy_naming_the_key(setup, reference, tmp_path):
    out = Path(shutil.copytree(reference, tmp_path / "run"))
    with pytest.raises(SystemExit, match=r"'strategy' was 'soft', now 'fusion'"):
        run_recipe(recipe.main, *soft_args(setup, out, "--resume", "true", "--strategy", "fusion"))


def test_resume_refuses_an_adapter_replaced_since_the_checkpoint(setup, tmp_path):
    """Another adapter of the same shape in an adapter's folder resumed with resumed_exactly true, trained on, and
    ended in a reload-check traceback after writing the composition with it; now refused, naming the file."""
    ours = {**setup, "area": Path(shutil.copytree(setup["area"], tmp_path / "area"))}
    out, short = tmp_path / "run", ["--strategy", "soft", "--baseline", "false", "--save_every", "1"]
    run_recipe(recipe.main, *compose_args(ours, out, *short, "--max_steps", "2"))
    replace_with_other_weights(ours["area"] / "adapter_model.safetensors")
    with pytest.raises(SystemExit, match=r"compose: resume: the run's inputs differ .*model file .*area/adapter_model"):
        run_recipe(recipe.main, *compose_args(ours, out, *short, "--max_steps", "3", "--resume", "true"))
    assert [r["event"] for r in read_log(out)][-1] == "end"  # nothing trained or written


def test_evaluation_only_scores_a_saved_composition_without_changing_it(setup, reference, tmp_path):
    saved = (reference / WEIGHTS).read_bytes()
    composition = reference / "composition"
    run_recipe(recipe.main, *compose_args(setup, tmp_path, "--do_train", "false", "--composition", composition))
    out = tmp_path / "eval"  # an evaluation writes beside the run in output_dir, into eval/
    (metrics, predictions), (expected, expected_predictions) = read_run(out), read_run(reference)
    assert metrics["accuracy"] == expected["accuracy"] and metrics["steps"] == 0
    assert metrics["method"] == "soft-composition" and predictions == expected_predictions
    assert (reference / WEIGHTS).read_bytes() == saved and not (out / "composition").exists()
    with pytest.raises(SystemExit, match="'composition' is required with --do_train false"):
        run_recipe(recipe.main, *compose_args(setup, tmp_path / "x", "--do_train", "false"))
    assert json.loads((out / "metrics.json").read_text())["composition"]["strategy"] == "soft"
