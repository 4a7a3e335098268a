"""Generated documents are up to date with what generates them: preset cards, result cards and the benchmark report."""

import json
from pathlib import Path

import pytest
from tests.helpers.scripts import load_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("script", ["model_cards/generate_preset_cards.py", "benchmarks/report.py"])
def test_generated_document_is_current(script, capsys):
    """`python <script> --check`, its `main` called in this process."""
    assert load_script(script).main(["--check"]) == 0, capsys.readouterr().err


def test_every_preset_has_a_card():
    import hfzoo

    cards = {p.stem for p in (ROOT / "model_cards" / "presets").glob("*.md")}
    assert cards == set(hfzoo.list_presets())


RESULT_CARDS = sorted(path.parent for path in (ROOT / "model_cards" / "results").glob("*/results.json"))


@pytest.mark.parametrize("card_dir", RESULT_CARDS, ids=lambda path: path.name)
def test_result_card_is_current(card_dir, monkeypatch):
    """A result card is rendered from its results.json alone (the run folders are not kept), so rendering it again
    must give the committed README.md: the card code and the card cannot drift apart."""
    monkeypatch.syspath_prepend(str(ROOT / "model_cards"))
    import generate_adapter_study
    import generate_electra_results
    import generate_finetune_results
    import generate_preset_race
    import generate_results
    import generate_speedrun_ablation
    import pretraining_study_card

    results = json.loads((card_dir / "results.json").read_text(encoding="utf-8"))
    if results.get("kind") == generate_preset_race.KIND:
        text = generate_preset_race.render(results, generate_preset_race.card_command(results["runs_dir"], card_dir))
    elif results.get("kind") == generate_speedrun_ablation.KIND:
        command = generate_speedrun_ablation.card_command(results["runs_dir"], card_dir)
        text = generate_speedrun_ablation.render(results, command)
    elif results.get("kind") == generate_adapter_study.KIND:
        text = generate_adapter_study.render(results, generate_adapter_study.card_command(results["runs_dir"], card_dir))
    elif "tasks" in results:  # a fine-tuning grid
        compared = results.get("compare", {}).get("card")
        command = generate_finetune_results.card_command(results["runs_dir"], card_dir, compared,
                                                         results.get("targets", False))
        text = generate_finetune_results.render(results, command)
    elif "finetuning" in results:  # the pretraining study
        command = pretraining_study_card.card_command(results["runs_dir"], card_dir)
        text = pretraining_study_card.render(results, command)
    elif "objectives" in results:  # ELECTRA against the masked LM
        command = generate_electra_results.card_command(results["runs_dir"], card_dir)
        text = generate_electra_results.render(results, command)
    else:
        text = generate_results.render(results)
    assert text == (card_dir / "README.md").read_text(encoding="utf-8")
