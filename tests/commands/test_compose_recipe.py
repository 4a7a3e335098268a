"""The composition recipe end to end, as users run it (`hfzoo.commands.compose.main`, what `hfzoo compose` calls).

Two real task adapters are trained here with the fine-tuning recipe on a tiny bert-tiny checkpoint (wordpiece
tokenizer trained on the task's own docstrings): LoRA on the stdlib `module` task (on qkv_proj and down_proj) and a
Pfeiffer bottleneck on the `area` task (down_proj), so the four down_proj modules carry both, and the four qkv_proj
modules weigh the LoRA against the base output (the bottleneck is absent there). The recipe then composes them for
the `area` task with a fresh head.
"""

from __future__ import annotations

import csv
import json
import os
from collections import Counter
from pathlib import Path

import pytest
import torch
from huggingface_hub import ModelCard
from peft import LoraConfig, get_peft_model
from safetensors.torch import load_file
from tests.helpers.composition_args import compose_args
from tests.helpers.recipe_runs import run_recipe
from tests.helpers.run_outputs import read_run
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import hfzoo
from hfzoo.adapters import compose, load_composition
from hfzoo.adapters.composition.task_adapter import save_base_identity
from hfzoo.cli import main as hfzoo_main
from hfzoo.commands import compose as recipe
from hfzoo.core.recorded_paths import resolve_recorded

REPO = Path(__file__).resolve().parents[2]
FUSION_CONFIG = REPO / "recipes" / "configs" / "compose" / "stdlib-area-fusion.yaml"
HEADS = ["classifier", "model.pooler.dense"]  # bert-tiny's fresh head: the classifier and the pooler the MLM lacks


def fresh_base(output_dir: Path, metrics: dict):
    """The base with a head of the trained one's shape, as the card's usage loads it (its head random, from `seed`);
    metrics.json names the base relative to the run folder."""
    kwargs = dict(metrics["model_kwargs"])
    kwargs["id2label"] = {int(k): v for k, v in kwargs["id2label"].items()}
    base = resolve_recorded(metrics["model"], output_dir)
    return AutoModelForSequenceClassification.from_pretrained(base, **kwargs).eval()


def reloaded_predictions(setup: dict[str, Path], output_dir: Path, metrics: dict, texts: list[str]) -> list[str]:
    """Labels predicted by the saved composition rebuilt on a fresh base, one text at a time (no padding)."""
    model = load_composition(fresh_base(output_dir, metrics), output_dir / "composition").eval()
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    labels = model.config.id2label
    with torch.no_grad():
        return [labels[int(model(**tokenizer(t, truncation=True, max_length=48, return_tensors="pt")).logits.argmax())]
                for t in texts]  # fmt: skip


def assert_only_trainable_parts_changed(setup: dict[str, Path], output_dir: Path, metrics: dict, strategy: str) -> dict:
    """Against the same adapters freshly composed on the base checkpoint: the base and every adapter weight are
    identical, and only router/fusion and head tensors may differ; the saved weights are exactly the trainable ones.
    Returns {key: (trained, fresh)} of the composition's own tensors."""
    trained = load_composition(fresh_base(output_dir, metrics), output_dir / "composition").state_dict()
    options = {"granularity": "sequence"} if strategy == "soft" else {}
    fresh = compose(fresh_base(output_dir, metrics), {"module": setup["module"], "area": setup["area"]}, strategy,
                    trainable_modules=HEADS, **options).state_dict()  # fmt: skip
    assert trained.keys() == fresh.keys()
    head = ("base_model.classifier.", "base_model.model.pooler.")
    own = {k for k in trained if ".combiner." in k or k.startswith(head)}
    changed = {k for k in trained if not torch.equal(trained[k], fresh[k])}
    assert changed <= own, sorted(changed - own)  # frozen base and adapters: bit-identical to the files
    stacked = {k.rsplit(".", 1)[-1] for k in trained if ".adapters.stacks." in k}
    assert {"A", "Bt", "down", "up_t"} <= stacked  # LoRA's factors and the bottleneck's, both composed
    saved = load_file(output_dir / "composition" / "composition.safetensors")
    assert sum(t.numel() for t in saved.values()) == metrics["trainable_parameters"]
    assert {f"base_model.{k}" for k in saved} == own
    return {k: (trained[k], fresh[k]) for k in own}


def test_fusion_beside_its_average_baseline_trains_only_fusion_and_head_and_reloads(setup, tmp_path):
    out = tmp_path / "fusion"
    run_recipe(recipe.main, "--config", FUSION_CONFIG, *compose_args(setup, out))
    metrics, predictions = read_run(out)
    assert {"accuracy", "f1", "trainable_parameters", "trainable_fraction"} <= metrics.keys()
    assert metrics["composition"]["strategy"] == "fusion" and metrics["composition"]["learned_modules"] == 8
    assert metrics["accuracy"] == sum(p["prediction"] == p["label"] for p in predictions) / len(predictions)
    assert metrics["reload_check"] == {"parameters_equal": True, "predictions_equal": True}

    # The baseline: the uniform average of the same adapters, only the head trained, same data and steps.
    baseline, _ = read_run(out / "average-baseline")
    assert baseline["composition"]["strategy"] == "average" and baseline["steps"] == metrics["steps"] == 6
    assert metrics["baselines"]["average"]["accuracy"] == baseline["accuracy"]
    head = AutoModelForSequenceClassification.from_pretrained(setup["base"], num_labels=6)
    head_size = sum(p.numel() for name in HEADS for p in head.get_submodule(name).parameters())
    assert baseline["trainable_parameters"] == head_size < metrics["trainable_parameters"]
    labels = [p["label"] for p in predictions]
    with open(setup["train"], newline="", encoding="utf-8") as handle:
        majority = Counter(row["label"] for row in list(csv.DictReader(handle))[:96]).most_common(1)[0][0]
    assert metrics["baselines"]["majority_class"]["accuracy"] == labels.count(majority) / len(labels)

    card = (out / "README.md").read_text(encoding="utf-8")
    assert "### Against the baselines" in card and "| uniform average of the same adapters, head trained |" in card
    assert f"| trainable parameters | {metrics['trainable_parameters']:,} |" in card
    assert "load_composition(base" in card and "PeftModel" not in card

    own = assert_only_trainable_parts_changed(setup, out, metrics, "fusion")
    value = [k for k in own if k.endswith("combiner.value.weight")]
    assert len(value) == 8 and all(not torch.equal(own[k][0], torch.eye(128)) for k in value)  # fusion trained
    texts = [p["text"] for p in predictions]
    assert reloaded_predictions(setup, out, metrics, texts) == [p["prediction"] for p in predictions]


def test_soft_router_without_baseline(setup, tmp_path):
    out = tmp_path / "soft"
    run_recipe(recipe.main, *compose_args(setup, out, "--strategy", "soft", "--strategy_options",
                                          "{granularity: sequence}", "--baseline", "false"))  # fmt: skip
    metrics, predictions = read_run(out)
    assert not (out / "average-baseline").exists() and "average" not in metrics["baselines"]
    assert metrics["composition"]["options"]["granularity"] == "sequence"
    assert metrics["reload_check"] == {"parameters_equal": True, "predictions_equal": True}
    own = assert_only_trainable_parts_changed(setup, out, metrics, "soft")
    routers = [trained for k, (trained, _) in own.items() if k.endswith("combiner.proj.weight")]
    assert len(routers) == 8 and all(r.abs().sum() > 0 for r in routers)  # zero-initialised, now trained
    texts = [p["text"] for p in predictions]
    assert reloaded_predictions(setup, out, metrics, texts) == [p["prediction"] for p in predictions]


def test_muon_trains_a_soft_router_and_the_head(setup, tmp_path):
    """`--optimizer muon` in composition: the routers' matrices under Muon, the biases under AdamW."""
    out = tmp_path / "soft-muon"
    run_recipe(recipe.main, *compose_args(setup, out, "--strategy", "soft", "--baseline", "false",
                                          "--optimizer", "muon"))  # fmt: skip
    metrics, _ = read_run(out)
    assert metrics["reload_check"] == {"parameters_equal": True, "predictions_equal": True}
    own = assert_only_trainable_parts_changed(setup, out, metrics, "soft")
    routers = [trained for k, (trained, _) in own.items() if k.endswith("combiner.proj.weight")]
    assert len(routers) == 8 and all(r.abs().sum() > 0 for r in routers)  # zero-initialised, now trained


def test_average_trains_the_head_alone(setup, tmp_path):
    out = tmp_path / "average"
    run_recipe(hfzoo_main, "compose", *compose_args(setup, out, "--strategy", "average"))
    metrics, _ = read_run(out)
    assert metrics["method"] == "average-composition" and metrics["composition"]["learned_modules"] == 0
    assert set(metrics["baselines"]) == {"majority_class"} and not (out / "average-baseline").exists()
    saved = load_file(out / "composition" / "composition.safetensors")
    head = ["classifier.bias", "classifier.weight", "model.pooler.dense.bias", "model.pooler.dense.weight"]
    assert sorted(saved) == head  # nothing but the head: an average has no parameters of its own
    assert metrics["reload_check"] == {"parameters_equal": True, "predictions_equal": True}
    assert "| majority class |" in (out / "README.md").read_text(encoding="utf-8")
    # As the Hub reads the card: hfzoo's load_composition loads the folder (it is not one PEFT adapter), and the
    # local base and data are no Hub ids.
    hub = ModelCard.load(out / "README.md").data
    assert hub.library_name == "hfzoo" and hub.base_model is None and hub.datasets is None
    assert hub.pipeline_tag == "text-classification" and "average-composition" in hub.tags
    # The adapters' folders are recorded relative to the run folder (they were absolute paths of the machine).
    adapters = metrics["composition"]["adapters"]
    assert not any(os.path.isabs(adapter["folder"]) for adapter in adapters)
    assert [Path(resolve_recorded(a["folder"], out)) for a in adapters] == [setup["module"], setup["area"]]


# ------------------------------------------------------------------------------------------ errors users see
def test_a_missing_adapter_folder_is_named_before_anything_loads(setup, tmp_path):
    ghost = tmp_path / "nowhere"
    with pytest.raises(SystemExit, match=f"adapter 'ghost': no adapter_config.json in {ghost}"):
        run_recipe(recipe.main, *compose_args(setup, tmp_path, "--adapters", f"area={setup['area']},ghost={ghost}"))
    with pytest.raises(SystemExit, match="'area=' is not name=path"):
        run_recipe(recipe.main, *compose_args(setup, tmp_path, "--adapters", "area="))


def test_an_adapter_for_another_base_shape_is_named(setup, tmp_path):
    """A LoRA adapter trained on a bert-tiny with a narrower feed-forward (intermediate 256, not 512)."""
    other = hfzoo.preset_config("bert-tiny", vocab_size=1000, intermediate_size=256, num_labels=6)
    model = get_peft_model(AutoModelForSequenceClassification.from_config(other),
                           LoraConfig(r=4, target_modules=["down_proj"], task_type="SEQ_CLS"))  # fmt: skip
    model.save_pretrained(tmp_path / "narrow")
    args = compose_args(setup, tmp_path / "out", "--adapters", f"area={setup['area']},narrow={tmp_path / 'narrow'}")
    message = r"adapter 'narrow' does not fit the base model at model\.layers\.0\.mlp\.down_proj: expected lora_A"
    with pytest.raises(ValueError, match=message + r" of shape \[4, 512\], found \[4, 256\]"):
        run_recipe(recipe.main, *args, "--strategy", "average")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--strategy", "fixed"], "'fixed' applies the adapter each example names"),
        (["--strategy", "mixture"], "unknown value 'mixture'. Valid: average, soft, hard, fusion"),
        (["--method", "lora"], "config key 'method' picks a fine-tuning method"),
        (["--config_overrides", "{max_position_embeddings: 64}"], "max_position_embeddings would change what the base"),
    ],
)
def test_config_mistakes_are_named(setup, tmp_path, args, message):
    with pytest.raises(SystemExit, match=message):
        run_recipe(recipe.main, *compose_args(setup, tmp_path / "out", *args))


def test_help_lists_task_and_composition_keys(capsys):
    with pytest.raises(SystemExit):
        hfzoo_main(["compose", "--help"])
    text = capsys.readouterr().out
    assert "usage: compose" in text
    assert all(f"--{key} " in text for key in ("adapters", "strategy", "baseline", "max_steps", "train_file"))


def test_the_recipe_records_the_base_and_refuses_adapters_of_another(setup, tmp_path):
    """Fine-tuning writes hfzoo_base.json beside the adapter; a gpt-tiny adapter (whose tensors would fit the
    bert-tiny base: same module names and sizes) is refused with both bases named, before any data loads."""
    record = json.loads((setup["module"] / "hfzoo_base.json").read_text())
    assert record["model_type"] == "hfzoo_encoder" and not os.path.isabs(record["base_model"])
    assert Path(resolve_recorded(record["base_model"], setup["module"])) == setup["base"]
    gpt = AutoModelForSequenceClassification.from_config(hfzoo.preset_config("gpt-tiny", vocab_size=1000))
    torch.manual_seed(0)
    get_peft_model(gpt, LoraConfig(r=4, target_modules=["qkv_proj"], task_type="SEQ_CLS")).save_pretrained(
        tmp_path / "gpt"
    )
    save_base_identity(tmp_path / "gpt", gpt)
    args = compose_args(setup, tmp_path / "out", "--adapters", f"area={setup['area']},gpt={tmp_path / 'gpt'}")
    with pytest.raises(SystemExit, match=r"'area' was trained on hfzoo_encoder .*'gpt' on hfzoo_decoder"):
        run_recipe(recipe.main, *args, "--strategy", "average")
    alone = compose_args(setup, tmp_path / "out", "--adapters", f"gpt={tmp_path / 'gpt'}")
    with pytest.raises(ValueError, match=r"adapter 'gpt' .*trained on hfzoo_decoder .*base model is hfzoo_encoder"):
        run_recipe(recipe.main, *alone, "--strategy", "average")
