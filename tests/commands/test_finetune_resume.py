"""Fine-tuning checkpoints, exact resume, the best model and evaluation-only runs (issue 17 item 4).

As for pretraining (test_pretrain_recipe.py): `python recipes/finetune.py` is killed by SIGKILL at a random step
after its first checkpoint and resumed with `--resume`; the weights it ends with (the full model, or the LoRA
adapter and head) must be bit-identical to an uninterrupted run's, and so must the best model kept by `save_best`.
A tiny bert-tiny checkpoint (dropout on, so the RNG states must be restored too) on the stdlib `area` task.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from tests.helpers.area_task import MAX_STEPS, finetune_args as args
from tests.helpers.recipe_runs import kill_at_a_random_step, run_finetune as run
from tests.helpers.run_outputs import assert_same_tensors, train_losses

from hfzoo.training import list_checkpoints, task_run
from hfzoo.training.logging import read_log

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "finetune.py"
WEIGHTS = {"full": "model.safetensors", "lora": "adapter_model.safetensors"}


@pytest.fixture(scope="module")
def references(base, tmp_path_factory) -> dict[str, Path]:
    """Uninterrupted runs, full fine-tuning and LoRA."""
    root = tmp_path_factory.mktemp("references")
    return {method: run(*args(base, root / method, method)) for method in WEIGHTS}


@pytest.mark.parametrize("method", list(WEIGHTS))
def test_sigkill_then_resume_gives_bit_identical_weights_and_best_model(base, references, tmp_path, method):
    out, reference = tmp_path / "killed", references[method]
    command = [sys.executable, str(RECIPE), *args(base, out, method)]
    target = kill_at_a_random_step(command, out, tmp_path / "log", MAX_STEPS)
    assert not (out / "metrics.json").exists(), "the run finished before it was killed"
    assert list_checkpoints(out), "killed before its first checkpoint"

    run(*args(base, out, method), "--resume", "true")
    start = [r for r in read_log(out) if r["event"] == "start"][-1]
    print(f"{method}: killed at step {target}, resumed from step {start['step']}")
    assert start["resumed_from"] is not None and start["step"] >= 3
    assert_same_tensors(out / WEIGHTS[method], reference / WEIGHTS[method])
    assert train_losses(out) == train_losses(reference)  # one record per step, each as uninterrupted
    metrics, expected = (json.loads((folder / "metrics.json").read_text()) for folder in (out, reference))
    assert metrics["best"] == expected["best"] and metrics["accuracy"] == expected["accuracy"]
    assert_same_tensors(out / "best" / WEIGHTS[method], reference / "best" / WEIGHTS[method])


def test_save_best_keeps_the_step_with_the_best_score(references):
    reference = references["full"]
    evaluations = [r for r in read_log(reference) if r["event"] == "eval"]
    assert [r["step"] for r in evaluations] == [4, 8, 12, 16]
    top = max(r["accuracy"] for r in evaluations)
    best_step = next(r["step"] for r in evaluations if r["accuracy"] == top)  # ties keep the earlier step
    best = json.loads((reference / "metrics.json").read_text())["best"]
    assert best == {"metric": "accuracy", "higher_is_better": True, "step": best_step, "score": top, "folder": "best"}
    assert (reference / "best" / "model.safetensors").is_file() and (reference / "best" / "tokenizer.json").is_file()
    assert not list(reference.glob(".*"))  # published atomically, no staging folder left behind


def _evaluate_only(base: dict[str, Path], out: Path, *model_args: str) -> dict:
    """An evaluation-only run with `--output_dir out`; its metrics.json, which it writes into `out/eval/`."""
    run("--task", "sequence-classification", "--train_file", str(base["train"]), "--validation_file",
        str(base["validation"]), "--max_train_samples", "64", "--max_eval_samples", "32", "--max_length", "48",
        "--per_device_batch_size", "8", "--do_train", "false", "--output_dir", str(out), *model_args)  # fmt: skip
    return json.loads((out / "eval" / "metrics.json").read_text())


def test_evaluation_only_scores_the_best_model_as_its_run_did_without_changing_it(base, references, tmp_path):
    best = references["full"] / "best"
    weights = (best / "model.safetensors").read_bytes()
    metrics = _evaluate_only(base, tmp_path, "--model", str(best))
    recorded = json.loads((references["full"] / "metrics.json").read_text())["best"]
    assert metrics["accuracy"] == recorded["score"] and metrics["steps"] == 0
    assert (best / "model.safetensors").read_bytes() == weights
    assert not (tmp_path / "eval" / "model.safetensors").exists() and not (tmp_path / "eval" / "README.md").exists()
    assert [r["event"] for r in read_log(tmp_path / "eval")] == ["start", "eval", "end"]


def test_evaluation_only_of_an_adapter_reproduces_its_runs_predictions(base, references, tmp_path):
    trained = references["lora"]
    adapter = (trained / "adapter_model.safetensors").read_bytes()
    metrics = _evaluate_only(base, tmp_path, "--model", str(base["base"]), "--adapter", str(trained))
    expected = json.loads((trained / "metrics.json").read_text())
    keys = ("accuracy", "f1", "method")
    assert {k: metrics[k] for k in keys} == {k: expected[k] for k in keys}
    assert (tmp_path / "eval" / "predictions.jsonl").read_text() == (trained / "predictions.jsonl").read_text()
    assert (trained / "adapter_model.safetensors").read_bytes() == adapter


def test_evaluation_only_refuses_a_model_without_a_trained_head(base, tmp_path):
    with pytest.raises(ValueError, match=r"holds no trained weights for .*classifier.*--adapter"):
        _evaluate_only(base, tmp_path, "--model", str(base["base"]))


def _copy(reference: Path, tmp_path: Path) -> Path:
    return Path(shutil.copytree(reference, tmp_path / "run"))


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_evaluation_only_in_the_trained_runs_folder_leaves_its_record_untouched(base, references, tmp_path):
    """`--do_train false` into a trained run's folder (both commands keeping the default output_dir) cut its
    log.jsonl to the evaluation's 3 records and rewrote metrics.json (steps 0) and training_config.yaml."""
    out = _copy(references["lora"], tmp_path)
    record = _files(out)
    metrics = _evaluate_only(base, out, "--model", str(base["base"]), "--adapter", str(out))
    assert _files(out).items() >= record.items()  # every file of the run, byte for byte
    assert metrics["steps"] == 0 and [r["event"] for r in read_log(out / "eval")] == ["start", "eval", "end"]
    assert _evaluate_only(base, out, "--model", str(base["base"]), "--adapter", str(out)) == metrics  # again


def test_a_new_run_into_a_finished_runs_folder_is_refused_unless_overwrite(base, references, tmp_path):
    """A fresh fine-tune into a finished folder without checkpoints silently replaced the trained adapter."""
    out = _copy(references["lora"], tmp_path)
    shutil.rmtree(out / "checkpoints")  # finished: nothing to resume
    record = _files(out)
    refused = rf"the output folder {out} is not empty .*--overwrite_output_dir"
    with pytest.raises(FileExistsError, match=refused):
        run(*args(base, out, "lora"))
    assert _files(out) == record
    (out / "notes.txt").write_bytes(b"mine")
    run(*args(base, out, "lora", "--max_steps", "4", "--overwrite_output_dir", "true"))
    assert (out / "notes.txt").read_bytes() == b"mine"
    assert json.loads((out / "metrics.json").read_text())["steps"] == 4
    assert [r["step"] for r in read_log(out) if r["event"] == "start"] == [0]


# With save_best the evaluation steps and the run length are kept too: the best model must be chosen among the same
# evaluations of the same weights.
CHANGES = [("--seed", "5"), ("--per_device_batch_size", "4"), ("--eval_every", "2"), ("--max_steps", "15")]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: c[0])
def test_resume_refuses_a_changed_config_naming_the_key(base, references, tmp_path, change):
    out = _copy(references["full"], tmp_path)
    weights = (out / "model.safetensors").read_bytes()
    with pytest.raises(SystemExit, match=rf"'{change[0][2:]}' was .*, now .*{change[1]}"):
        run(*args(base, out, "full"), "--resume", "true", *change)
    assert (out / "model.safetensors").read_bytes() == weights


def test_a_finished_run_resumes_from_its_last_step_to_nothing_or_extended_not_exactly(base, tmp_path, caplog):
    """A finished run keeps its last step's checkpoint: resumed, it has nothing to do; extended with a larger
    max_steps, it goes on from there (not from its last periodic checkpoint, retraining steps it had), and says in one
    line, and in its log, that the learning-rate schedule changed, which it said nowhere before."""
    out, short = tmp_path / "short", ["--save_best", "false", "--max_steps", "7"]
    run(*args(base, out, "lora", *short))
    assert [p.name for p in list_checkpoints(out)] == ["step-00000006", "step-00000007"]
    before = {name: (out / name).read_bytes() for name in ("adapter_model.safetensors", "metrics.json", "log.jsonl")}
    run(*args(base, out, "lora", *short), "--resume", "true")
    assert {name: (out / name).read_bytes() for name in before} == before
    with pytest.raises(FileExistsError, match="already holds checkpoints.*--resume"):
        run(*args(base, out, "lora", *short))
    run(*args(base, out, "lora", *short, "--max_steps", "9"), "--resume", "true")
    start = [r for r in read_log(out) if r["event"] == "start"][-1]
    line = "resumed with max_steps 9, the checkpoint's run planned 7: the learning-rate schedule changes from step 8 on"
    assert (start["step"], start["resumed_exactly"]) == (7, False) and line in start["not_exact_because"][0]
    assert caplog.text.count("is not exact") == 1 and line in caplog.text
    assert json.loads((out / "metrics.json").read_text())["steps"] == 9


def test_a_run_stopped_before_training_may_start_again_in_its_folder(base, tmp_path):
    """What a run writes before its first step (its config, if killed there) is no finished run: running again needs
    no overwrite. A refused run writes nothing at all."""
    out, short = tmp_path / "run", ["--save_best", "false", "--max_steps", "2"]
    with pytest.raises(ValueError, match="max_length"):
        run(*args(base, out, "lora", *short, "--max_length", "100000"))
    assert not out.exists()
    out.mkdir()
    (out / "training_config.yaml").write_text("seed: 0\n")
    run(*args(base, out, "lora", *short))
    assert json.loads((out / "metrics.json").read_text())["steps"] == 2


def test_resume_of_a_run_stopped_before_its_first_checkpoint_says_it_has_none(base, tmp_path, monkeypatch):
    """Such a folder (its config and log) was refused as "not empty", as if --resume had not been given."""
    out, short = tmp_path / "run", ["--save_best", "false", "--max_steps", "2", "--eval_every", "1"]  # save_every 3

    def killed(*_):
        raise OSError("killed")

    with monkeypatch.context() as patch:
        patch.setattr(task_run, "evaluate_task", killed)  # at step 1, before the first checkpoint
        with pytest.raises(OSError, match="killed"):
            run(*args(base, out, "lora", *short))
    assert (out / "log.jsonl").is_file() and not list_checkpoints(out)
    with pytest.raises(FileNotFoundError, match=rf"--resume: {out} holds no checkpoint yet .*--overwrite_output_dir"):
        run(*args(base, out, "lora", *short), "--resume", "true")
    run(*args(base, out, "lora", *short), "--resume", "true", "--overwrite_output_dir", "true")
    assert json.loads((out / "metrics.json").read_text())["steps"] == 2


def test_checkpoints_of_adalora_are_refused_before_training(base, tmp_path):
    """AdaLoRA's rank allocator keeps importance scores outside the model and optimizer: not resumable exactly."""
    adalora = str(REPO / "recipes" / "configs" / "finetune" / "adalora.json")
    with pytest.raises(ValueError, match="AdaLoRA keeps its rank allocator's importance scores"):
        run(*args(base, tmp_path / "adalora", "lora", "--peft_config", adalora, "--save_best", "false"))
    assert not (tmp_path / "adalora" / "log.jsonl").exists()


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--save_best", "true", "--eval_every", "null"], "'save_best' needs eval_every"),
        (["--best_metric", "loss"], "'best_metric': 'loss' is not a validation metric"),
        (["--save_best", "false", "--best_metric", "f1"], "'best_metric' ranks the evaluations for save_best"),
        (["--do_train", "false"], "'do_train' is false: .* drop resume, save_every and save_best"),
        (["--adapter", "x"], "'adapter' names a trained adapter to evaluate: use it with --do_train false"),
        (["--allow_other_base", "true"], "'allow_other_base' lets --adapter run on another base; without --adapter"),
    ],
)
def test_contradictory_settings_are_named(base, tmp_path, extra, message):
    with pytest.raises(SystemExit, match=message):
        run(*args(base, tmp_path / "x", "full", *extra))
