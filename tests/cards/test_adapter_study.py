"""model_cards/generate_adapter_study.py: the study's variants are real recorded runs of the recipe, its card is
built from them, and the recipe's per-method defaults are the variants the card names as the winners."""

from __future__ import annotations

import json
import sys

import pytest
import yaml
from peft import TaskType
from tests.helpers.paths import REPO

from hfzoo.adapters.methods import DEFAULT_LEARNING_RATES, MethodOptions, peft_config_for

sys.path.insert(0, str(REPO / "model_cards"))
import generate_adapter_study as study  # noqa: E402

TINY = ["--max_steps", "2", "--max_train_samples", "32", "--max_eval_samples", "16", "--per_device_batch_size", "8",
        "--max_length", "48"]  # fmt: skip (the tiny native BERT has 64 positions)


def _options(variant: study.Variant) -> tuple[str, dict, float]:
    """A variant's method, its `--method_options.*` values read as YAML, as the recipe reads them, and its learning rate."""
    args = dict(zip(variant.args[::2], variant.args[1::2]))
    options = {k.removeprefix("--method_options."): yaml.safe_load(v) for k, v in args.items()
               if k.startswith("--method_options.")}  # fmt: skip
    return args["--method"], options, float(args["--learning_rate"])


@pytest.mark.parametrize("method", ["lora", "bottleneck"])
def test_the_recipe_defaults_are_the_study_winners_the_card_names(method):
    """Changing a default without the study (or the study without the default) fails here: the card would claim a
    default the recipe does not have."""
    variant = next(v for v in study.VARIANTS if v.name == study.DEFAULT_VARIANTS[method])
    found, options, learning_rate = _options(variant)
    assert found == method and learning_rate == DEFAULT_LEARNING_RATES[method]
    default = peft_config_for(MethodOptions(method=method), TaskType.SEQ_CLS, [])
    winner = peft_config_for(MethodOptions(method=method, method_options=options), TaskType.SEQ_CLS, [])
    assert default.to_dict() == winner.to_dict()


@pytest.mark.slow  # the whole study in tiny mode, 65 s in CI; the defaults test above checks its winners
def test_study_runs_and_card(native_folders, tmp_path, monkeypatch):
    monkeypatch.chdir(REPO)  # as main() does: the configs' data paths are relative to the repository
    monkeypatch.setattr(study, "STUDY_TASKS", {"sst2": (study.STUDY_TASKS["sst2"][0], TINY)})
    runs = tmp_path / "runs"
    chosen = ["full", "lora-attention-r8-lr5e-4", *study.DEFAULT_VARIANTS.values()]
    assert study.run_study(runs, native_folders["bert"], ["sst2"], chosen, threads=1) == 0
    record = json.loads((runs / f"sst2-{study.DEFAULT_VARIANTS['lora']}" / study.RUN_RECORD).read_text())
    assert "--method_options.target_modules all-linear" in record["command"] and "OMP_NUM_THREADS=1" in record["command"]

    card = study.card(runs, tmp_path / "card")
    variants = json.loads((tmp_path / "card" / "results.json").read_text())["tasks"]["sst2"]["variants"]
    assert set(variants) == set(chosen)
    fraction = {name: run["trainable_fraction"] for name, run in variants.items()}
    assert fraction[study.DEFAULT_VARIANTS["lora"]] > fraction["lora-attention-r8-lr5e-4"]  # every linear layer, not one
    text = card.read_text()
    for name, run in variants.items():
        assert f"| {name} | {100 * run['value']:.2f} |" in text
    assert "- sst2: the default lora is " in text and "- sst2: the default bottleneck is " in text
    assert "`--method lora`: target_modules all-linear, r 8, lora_alpha 16, learning rate 0.002 (variant " in text
    assert text.rstrip().endswith("model_cards/generate_adapter_study.py card " + study.shown(str(runs)) + " "
                                  + study.shown(str(tmp_path / "card")) + "\n```")  # fmt: skip
