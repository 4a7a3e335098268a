"""Small files (issue 34): no Python file of the package, the recipes, the benchmarks or the card generators is longer
than a reader can hold, 500 lines; a file that grows past it is split by subject, as `generate_pretraining_study.py`
(the runs) and `pretraining_study_card.py` (the card) were."""

from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("hfzoo", "recipes", "benchmarks", "model_cards")
MAX_LINES = 500


def test_no_source_file_is_over_500_lines():
    lengths = {path.relative_to(ROOT).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
               for folder in FOLDERS for path in (ROOT / folder).rglob("*.py")}  # fmt: skip
    assert len(lengths) > 100, f"found only {len(lengths)} Python files under {', '.join(FOLDERS)}"
    too_long = {path: lines for path, lines in lengths.items() if lines > MAX_LINES}
    assert not too_long, f"over {MAX_LINES} lines (split by subject): {too_long}"
