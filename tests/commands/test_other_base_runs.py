"""`hfzoo finetune --adapter` and `hfzoo compose --adapters` refuse a base of the adapter's kind and sizes with other
weights (issue 37 item 7, as `hfzoo generate` and `convert adapter-to-native` do): the adapter's `hfzoo_base.json`
records the hash of its base's weights, and an adapter computed on another seed's weights would be scored or
composed silently. `--allow_other_base true` uses that base anyway, with a warning."""

import shutil
from pathlib import Path

import pytest
import torch
from tests.helpers.area_task import short_lora_args
from tests.helpers.composition_args import SMALL
from tests.helpers.recipe_runs import run_finetune, run_recipe
from transformers import AutoConfig, AutoModelForMaskedLM

from hfzoo.commands import compose


@pytest.fixture(scope="module")
def runs(base, tmp_path_factory) -> tuple[Path, Path]:
    """(a 4-step LoRA run on `base`, a bert-tiny of the same config from another seed with the same tokenizer)."""
    root = tmp_path_factory.mktemp("other-base-runs")
    run = run_finetune(*short_lora_args(base, root / "run"))
    torch.manual_seed(1)
    AutoModelForMaskedLM.from_config(AutoConfig.from_pretrained(base["base"])).save_pretrained(root / "other")
    for file in base["base"].glob("*.json"):
        if file.name != "config.json":
            shutil.copy(file, root / "other" / file.name)
    return run, root / "other"


def _data(base: dict[str, Path]) -> list[str]:
    return ["--task", "sequence-classification", "--train_file", str(base["train"]), "--validation_file",
            str(base["validation"]), *SMALL]  # fmt: skip


def test_evaluating_an_adapter_on_another_base_of_its_shape_is_refused_unless_allowed(base, runs, tmp_path):
    run, other_base = runs
    evaluate = [*_data(base), "--model", str(other_base), "--adapter", str(run), "--do_train", "false"]
    with pytest.raises(ValueError, match=rf"the base model {other_base} is not the one adapter 'run' .*its weights "
                                         r"differ from the recorded ones.*--allow_other_base"):  # fmt: skip
        run_finetune(*evaluate, "--output_dir", str(tmp_path / "refused"))
    assert not (tmp_path / "refused" / "eval" / "metrics.json").exists()
    run_finetune(*evaluate, "--output_dir", str(tmp_path / "allowed"), "--allow_other_base", "true")
    assert (tmp_path / "allowed" / "eval" / "metrics.json").is_file()


def test_composing_an_adapter_on_another_base_of_its_shape_is_refused_unless_allowed(base, runs, tmp_path):
    run, other_base = runs
    composing = [*_data(base), "--model", str(other_base), "--adapters", f"area={run}", "--strategy", "soft",
                 "--baseline", "false", "--max_steps", "1"]  # fmt: skip
    with pytest.raises(ValueError, match=rf"the base model {other_base} is not the one adapter 'area' .*its weights "
                                         r"differ from the recorded ones"):  # fmt: skip
        run_recipe(compose.main, *composing, "--output_dir", str(tmp_path / "refused"))
    assert not (tmp_path / "refused" / "metrics.json").exists()
    run_recipe(compose.main, *composing, "--output_dir", str(tmp_path / "allowed"), "--allow_other_base", "true")
    assert (tmp_path / "allowed" / "metrics.json").is_file()
