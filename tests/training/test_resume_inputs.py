"""Resume checks the inputs outside the checkpoint that decide the result (issue 27 item 5): the tokenizer's files
and the data files. Swapping two vocabulary ids in the output folder's tokenizer resumed silently to other weights;
deleting it failed with an error naming no file; training data edited in place under the same path resumed silently.
Each is now refused, naming the file and what changed, before a step is trained or a file written. Real tiny runs of
the pretraining and fine-tuning recipes, each with a checkpoint, edited, then resumed.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from tests.helpers.area_task import short_lora_args
from tests.helpers.recipe_runs import run_finetune, run_pretrain
from tests.helpers.run_outputs import replace_with_other_weights

from hfzoo.core.recorded_paths import resolve_recorded
from hfzoo.training import list_checkpoints
from hfzoo.training.logging import read_log

PRETRAIN = ["--max_steps", "4", "--save_every", "2", "--eval_every", "4"]


def _corpus(folder: Path) -> Path:
    """A local corpus (train.jsonl, validation.jsonl) of the docstrings of `json`, `pathlib` and `shutil`."""
    texts = [inspect.getdoc(member) for module in (json, shutil, Path) for _, member in inspect.getmembers(module)
             if inspect.getdoc(member) and len(inspect.getdoc(member)) > 200]  # fmt: skip
    folder.mkdir()
    for split, part in (("train", texts[:-5]), ("validation", texts[-5:])):
        (folder / f"{split}.jsonl").write_text("".join(json.dumps({"text": t}) + "\n" for t in part))
    return folder


@pytest.fixture
def pretrained(tmp_path) -> tuple[Path, Path]:
    """(a finished 4-step gpt-tiny run on a local corpus with checkpoints at steps 2 and 4, the corpus): a run per
    test, since a resumed run must name the data by the path it was trained with."""
    corpus = _corpus(tmp_path / "corpus")
    return run_pretrain("--dataset", str(corpus), *PRETRAIN, "--output_dir", str(tmp_path / "run")), corpus


def _resume_pretraining(run: Path, corpus: Path) -> Path:
    return run_pretrain("--dataset", str(corpus), *PRETRAIN, "--max_steps", "6", "--output_dir", str(run), "--resume")


def _swap_two_ids(tokenizer_json: Path) -> None:
    """Exchange the ids of two ordinary tokens of the vocabulary: the file keeps its size, the run its token count."""
    tokenizer = json.loads(tokenizer_json.read_text(encoding="utf-8"))
    vocab = tokenizer["model"]["vocab"]
    first, second = [token for token, index in vocab.items() if index in (100, 101)]
    vocab[first], vocab[second] = vocab[second], vocab[first]
    tokenizer_json.write_text(json.dumps(tokenizer, ensure_ascii=False), encoding="utf-8")


def _edit_in_place(file: Path) -> None:
    """Change one letter of the training data, keeping the file's size and path."""
    text = file.read_text(encoding="utf-8")
    at = text.index("e", len(text) // 2)
    file.write_text(text[:at] + "a" + text[at + 1 :], encoding="utf-8")


def _untouched(run: Path):
    """The run's log and checkpoints now, to compare with after a refused resume."""
    return (run / "log.jsonl").read_text(), [p.name for p in list_checkpoints(run)]


def test_an_unchanged_run_resumes_from_its_last_step_not_exactly_for_a_longer_run(pretrained):
    """The finished run resumes from its last step's checkpoint (it resumed from step 2 and retrained 3 and 4), and
    its log says a run extended to 6 steps is not exact (its learning-rate schedule was planned over 4)."""
    run, corpus = pretrained
    _resume_pretraining(run, corpus)
    records = read_log(run)
    assert [r["step"] for r in records if r["event"] == "start"] == [0, 4]
    assert records[-1]["event"] == "end" and records[-1]["step"] == 6
    start = [r for r in records if r["event"] == "start"][-1]
    assert start["resumed_exactly"] is False
    assert "resumed with max_steps 6, the checkpoint's run planned 4" in start["not_exact_because"][0]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda run, corpus: _swap_two_ids(run / "tokenizer.json"), r"tokenizer file .*run/tokenizer.json has changed"),
        (lambda run, corpus: (run / "tokenizer.json").unlink(), r"tokenizer file .*run/tokenizer.json is missing"),
        (lambda run, corpus: _edit_in_place(corpus / "train.jsonl"),
         r"data file .*corpus/train.jsonl has changed: same size, but its SHA-256 differs"),
        (lambda run, corpus: (corpus / "train.jsonl").write_text('{"text": "short"}\n'),
         r"data file .*corpus/train.jsonl has changed: 18 bytes, \d+ when"),
        (lambda run, corpus: shutil.copy(corpus / "train.jsonl", corpus / "more-train.jsonl"),
         r"data file .*corpus/more-train.jsonl is new"),
    ],
    ids=["tokenizer-ids-swapped", "tokenizer-deleted", "data-edited", "data-truncated", "data-added"],
)
def test_pretraining_resume_refuses_changed_inputs_naming_the_file(pretrained, edit, message):
    run, corpus = pretrained
    edit(run, corpus)
    before = _untouched(run)
    with pytest.raises(SystemExit, match=rf"pretrain: resume: the run's inputs differ .*{message}"):
        _resume_pretraining(run, corpus)
    assert _untouched(run) == before


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda base: _edit_in_place(base["train"]), r"data file .*data/train.csv has changed"),
        (lambda base: _swap_two_ids(base["base"] / "tokenizer.json"), r"tokenizer file .*base/tokenizer.json has"),
        (lambda base: replace_with_other_weights(base["base"] / "model.safetensors"),
         r"model file .*base/model.safetensors has changed: same size, but its SHA-256 differs"),
    ],
    ids=["data-edited", "base-tokenizer-ids-swapped", "base-weights-replaced"],
)
def test_finetuning_resume_refuses_changed_inputs_naming_the_file(finetuned, edit, message):
    """The base model's tokenizer (where a fine-tuning run reads it), its weights (a LoRA run's frozen base: another
    model of the same shape there resumed with resumed_exactly true) and the training file are checked too."""
    base, run = finetuned
    edit(base)
    before = _untouched(run)
    with pytest.raises(SystemExit, match=rf"finetune: resume: the run's inputs differ .*{message}"):
        run_finetune(*short_lora_args(base, run, "--max_steps", "6", "--resume", "true"))
    assert _untouched(run) == before


def _write_inputs_as_given(checkpoint: Path, inputs: dict, given: Callable[[str], str]) -> None:
    """Write `inputs` (the checkpoint's inputs.json as saved) naming the files as an older hfzoo did, by the path the
    run was given (`given` of the file's path from here), and list the file again in the manifest as it did."""
    older = {section: {given(resolve_recorded(name, checkpoint.parent.parent)): fingerprint
                       for name, fingerprint in inputs[section].items()} for section in ("data", "models")}  # fmt: skip
    older["tokenizer"] = inputs["tokenizer"]  # and no "paths", which says how they are named now
    (checkpoint / "inputs.json").write_text(json.dumps(older))
    manifest = json.loads((checkpoint / "manifest.json").read_text())
    data = (checkpoint / "inputs.json").read_bytes()
    manifest["files"]["inputs.json"] = {"size": len(data), "sha256": hashlib.sha256(data).hexdigest()}
    (checkpoint / "manifest.json").write_text(json.dumps(manifest))


def test_an_older_checkpoint_naming_its_inputs_as_given_is_still_checked(finetuned):
    """inputs.json names the data and model files relative to the run folder (issue 37 item 11); an older one named
    them as the run was given them (absolute, or from the working directory): a resume still compares them."""
    base, run = finetuned
    saved = {checkpoint: json.loads((checkpoint / "inputs.json").read_text()) for checkpoint in list_checkpoints(run)}
    names = [name for inputs in saved.values() for section in ("data", "models") for name in inputs[section]]
    assert names and all(name.startswith("../") for name in names)  # relative to the run folder
    resume = short_lora_args(base, run, "--max_steps", "6", "--resume", "true")
    train = base["train"].read_bytes()
    for given in (os.path.abspath, os.path.relpath):
        for checkpoint, inputs in saved.items():
            _write_inputs_as_given(checkpoint, inputs, given)
        _edit_in_place(base["train"])
        with pytest.raises(SystemExit, match=r"finetune: resume: the run's inputs differ .*data/train.csv has changed"):
            run_finetune(*resume)
        base["train"].write_bytes(train)
    run_finetune(*resume)  # the unchanged files, named the older way, are the ones recorded
    assert [r["step"] for r in read_log(run) if r["event"] == "start"] == [0, 4]
