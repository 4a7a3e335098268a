"""model_cards/generate_electra_results.py end to end at a tiny scale: recorded masked-LM and ELECTRA pretraining
runs, each fine-tuned on SST-2, and a card whose every number comes from the run folders."""

from __future__ import annotations

import json
import sys

import pytest
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "model_cards"))
import generate_electra_results as electra_results  # noqa: E402

PRETRAINING = ["--preset", "bert-tiny", "--tokenizer_kind", "wordpiece", "--vocab_size", "384", "--max_steps", "2",
               "--max_train_samples", "40", "--max_eval_samples", "10", "--block_size", "32",
               "--per_device_batch_size", "4", "--eval_every", "2", "--save_every", "100", "--tensorboard", "false"]
FINETUNING = ["--max_steps", "2", "--per_device_batch_size", "8", "--max_train_samples", "32",
              "--max_eval_samples", "16"]  # fmt: skip


@pytest.mark.slow
def test_runs_and_card(shared_data, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # as main() does: the configs' data paths are relative to the repository
    runs = tmp_path / "runs"
    assert electra_results.run(runs, PRETRAINING, FINETUNING, ["1e-3"], [42, 43], mlm_steps=3) == 0
    for run in ("pretrain-mlm", "pretrain-electra"):
        assert (runs / run / "baseline.json").is_file()  # recorded like every pretraining result
    card = electra_results.card(runs, tmp_path / "card")
    results = json.loads((tmp_path / "card" / "results.json").read_text())
    mlm, electra = results["objectives"]["mlm"], results["objectives"]["electra"]
    assert electra["config"]["objective"] == "electra"
    assert electra["last_evaluation"]["eval_discriminator_loss"] > 0
    # equal compute: the masked LM's own step count replaces the shared one instead of following it
    assert (mlm["training"]["steps"], electra["training"]["steps"]) == (3, 2)
    assert mlm["commands"]["run"].count("--max_steps") == 1
    assert {base: {rate: sorted(seeds) for rate, seeds in rates.items()} for base, rates in results["sst2"].items()} \
        == {base: {"1e-3": ["42", "43"]} for base in ("mlm", "electra", "scratch")}
    scratch = results["sst2"]["scratch"]["1e-3"]["42"]
    assert "--from_scratch true" in scratch["command"] and "pretrain-mlm" in scratch["command"]
    assert all(run["steps"] == 2 for rates in results["sst2"].values() for run in rates["1e-3"].values())
    text = card.read_text()
    accuracies = [results["sst2"]["electra"]["1e-3"][seed]["accuracy"] for seed in ("42", "43")]
    assert f"| electra base | 1e-3 (best) | {sum(accuracies) / 2:.4f} |" in text
    assert f"| majority class | - | {results['sst2_majority_class_accuracy']:.4f} |" in text
    assert "- ELECTRA beats masked-LM" in text or "- ELECTRA does not beat masked-LM" in text
    assert "- the electra pretraining transfers" in text or "- the electra pretraining does NOT transfer" in text
