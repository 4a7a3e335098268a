"""Saved checkpoints run where hfzoo cannot be imported, through transformers' `trust_remote_code`.

`save_pretrained` copies the modeling files next to the weights; this loads them in a separate Python process in
which `import hfzoo` fails for real (a blocking package comes first on PYTHONPATH), from a directory outside the
repository, offline, with its own module cache, and compares with the logits and tokens of the parent process.
Then as a user shares a pretraining run: the recipe's output of each family loads there as every head the family
has, and `Trainer` fine-tunes one of them.
"""

import json
import math
import textwrap
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModelForCausalLM

# checkpoint name -> (preset, config overrides); "speedrun" has every switch of issue 36 on.
PRESETS = {
    "gpt-tiny": ("gpt-tiny", {}),
    "llama-tiny": ("llama-tiny", {}),
    "llama-moe-tiny": ("llama-moe-tiny", {}),
    "speedrun": ("llama-tiny", dict(qk_norm=True, activation="relu2", logit_softcap=2.0, zero_init_projections=True)),
}
INPUT_IDS = torch.tensor([[0, 0, 11, 12, 13], [21, 22, 23, 24, 25]])
ATTENTION_MASK = (INPUT_IDS != 0).long()
NEW_TOKENS = 6

CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch
    from safetensors.torch import load_file, save_file

    checkpoints, results = Path(sys.argv[1]), Path(sys.argv[2])
    try:
        import hfzoo
    except ImportError as error:
        (results / "import_error.txt").write_text(str(error))
    else:
        raise SystemExit(f"hfzoo should not be importable here, got {hfzoo.__file__}")
    from transformers import AutoModelForCausalLM

    for checkpoint in sorted(checkpoints.iterdir()):
        inputs = load_file(checkpoint.parent.parent / "inputs.safetensors")
        model = AutoModelForCausalLM.from_pretrained(checkpoint, trust_remote_code=True).eval()
        assert type(model).__module__.startswith("transformers_modules."), type(model).__module__
        with torch.no_grad():
            logits = model(**inputs).logits
            generated = model.generate(**inputs, max_new_tokens=%d, min_new_tokens=%d, do_sample=False)
        save_file({"logits": logits, "generated": generated}, results / f"{checkpoint.name}.safetensors")
        (results / f"{checkpoint.name}.module").write_text(sys.modules[type(model).__module__].__file__)
    """
    % (NEW_TOKENS, NEW_TOKENS)
)


def parent_outputs(model) -> dict[str, torch.Tensor]:
    with torch.no_grad():
        logits = model(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK).logits
        generated = model.generate(
            input_ids=INPUT_IDS,
            attention_mask=ATTENTION_MASK,
            max_new_tokens=NEW_TOKENS,
            min_new_tokens=NEW_TOKENS,
            do_sample=False,
        )
    return {"logits": logits, "generated": generated}


@pytest.fixture(scope="module")
def remote_code_run(tmp_path_factory, tiny_model, hfzoo_free_python) -> tuple[dict, Path]:
    """Save every preset, load them all in one child process (imports dominate), return parent outputs + results."""
    root = tmp_path_factory.mktemp("remote_code")
    checkpoints, results = root / "checkpoints", root / "results"
    results.mkdir()
    save_file({"input_ids": INPUT_IDS, "attention_mask": ATTENTION_MASK}, root / "inputs.safetensors")
    expected = {}
    for preset, (base, overrides) in PRESETS.items():
        model = tiny_model(base, pad_token_id=0, **overrides)
        model.save_pretrained(checkpoints / preset)
        # The reference runs the same weights file through the installed hfzoo code. (Weights loaded from
        # safetensors sit at other memory alignments than freshly initialised ones, and MKL's GEMM may then round
        # differently in the last bit; comparing loaded with loaded isolates the code, which must match bit for bit.)
        loaded = AutoModelForCausalLM.from_pretrained(checkpoints / preset).eval()
        assert type(loaded) is type(model)
        expected[preset] = parent_outputs(loaded)
        fresh = parent_outputs(model)
        torch.testing.assert_close(expected[preset]["logits"], fresh["logits"], atol=1e-6, rtol=0)
    child = hfzoo_free_python.run(CHILD, root, str(checkpoints), str(results))
    assert child.returncode == 0, child.stderr[-4000:]
    return expected, results


def test_the_child_process_cannot_import_hfzoo(remote_code_run, hfzoo_free_python):
    _, results = remote_code_run
    assert (results / "import_error.txt").read_text() == "hfzoo is hidden from this process on purpose"
    # The saved code was imported from the module cache the child was given, one folder per checkpoint.
    modules = {Path((results / f"{preset}.module").read_text()) for preset in PRESETS}
    assert len({module.parent for module in modules}) == len(PRESETS)
    assert all(module.is_relative_to(hfzoo_free_python.modules / "transformers_modules") for module in modules)


@pytest.mark.parametrize("preset", PRESETS)
def test_remote_code_gives_identical_logits_and_generations(preset, remote_code_run):
    expected, results = remote_code_run
    remote = load_file(results / f"{preset}.safetensors")
    assert torch.equal(remote["logits"], expected[preset]["logits"])
    assert torch.equal(remote["generated"], expected[preset]["generated"])


# ------------------------------------------------------------------ every head of a recipe's output, without hfzoo
# What a user does: pretrain with the recipe, share the folder, and load it as any head where hfzoo is not installed.
# Each family's Auto classes, with the class each must give (transformers' name -> hfzoo's class name).
HEADS = {
    "decoder": {
        "AutoModel": "ZooDecoderModel",
        "AutoModelForCausalLM": "ZooDecoderForCausalLM",
        "AutoModelForSequenceClassification": "ZooDecoderForSequenceClassification",
        "AutoModelForTokenClassification": "ZooDecoderForTokenClassification",
        "AutoModelForQuestionAnswering": "ZooDecoderForQuestionAnswering",
        "AutoModelForMultipleChoice": "ZooDecoderForMultipleChoice",
    },
    "encoder": {
        "AutoModel": "ZooEncoderModel",
        "AutoModelForPreTraining": "ZooEncoderForPreTraining",
        "AutoModelForMaskedLM": "ZooEncoderForMaskedLM",
        "AutoModelForSequenceClassification": "ZooEncoderForSequenceClassification",
        "AutoModelForTokenClassification": "ZooEncoderForTokenClassification",
        "AutoModelForQuestionAnswering": "ZooEncoderForQuestionAnswering",
        "AutoModelForMultipleChoice": "ZooEncoderForMultipleChoice",
    },
    "encoder_decoder": {
        "AutoModel": "ZooEncoderDecoderModel",
        "AutoModelForSeq2SeqLM": "ZooEncoderDecoderForConditionalGeneration",
        "AutoModelForSequenceClassification": "ZooEncoderDecoderForSequenceClassification",
        "AutoModelForQuestionAnswering": "ZooEncoderDecoderForQuestionAnswering",
        "AutoModelForTokenClassification": "ZooEncoderDecoderForTokenClassification",
        "AutoModelForTextEncoding": "ZooEncoderDecoderEncoderModel",
    },
}
# family -> (preset, objective, the Auto class its card names)
PRETRAINED = {
    "decoder": ("gpt-tiny", "clm", "AutoModelForCausalLM"),
    "encoder": ("bert-tiny", "mlm_nsp", "AutoModelForPreTraining"),
    "encoder_decoder": ("t5-tiny", "span_corruption", "AutoModelForSeq2SeqLM"),
}
RECIPE_CONFIG = Path(__file__).resolve().parents[2] / "recipes" / "configs" / "test-gpt-tiny-clm.yaml"

HEADS_CHILD = textwrap.dedent(
    """
    import json
    import sys
    from pathlib import Path

    import torch
    import transformers
    from datasets import Dataset
    from transformers import AutoTokenizer, DataCollatorWithPadding, Trainer, TrainingArguments

    jobs, results = json.loads(Path(sys.argv[1]).read_text()), {}


    def inputs_for(auto_name, tokenizer, family):
        tokenizer.padding_side = "right"
        batch = dict(tokenizer(["the first text", "a second, longer text to read"], padding=True, return_tensors="pt"))
        if auto_name == "AutoModelForMultipleChoice":
            return {name: tensor[:, None].expand(-1, 2, -1) for name, tensor in batch.items()}
        if family == "encoder_decoder" and auto_name in ("AutoModel", "AutoModelForSeq2SeqLM"):
            batch["decoder_input_ids"] = batch["input_ids"][:, :3]
        return batch


    for family, (folder, heads) in jobs.items():
        tokenizer = AutoTokenizer.from_pretrained(folder)
        for auto_name in heads:
            model, info = getattr(transformers, auto_name).from_pretrained(
                folder, trust_remote_code=True, output_loading_info=True
            )
            with torch.no_grad():
                outputs = model.eval()(**inputs_for(auto_name, tokenizer, family))
            results[f"{family}/{auto_name}"] = {
                "class": type(model).__name__,
                "module": type(model).__module__,
                "missing": sorted(info["missing_keys"]),
                "unexpected": sorted(info["unexpected_keys"]),
                "outputs": [name for name, value in outputs.items() if value is not None],
            }

    # One optimizer step of transformers' Trainer on the decoder's sequence classifier, saved and reloaded.
    folder = jobs["decoder"][0]
    tokenizer = AutoTokenizer.from_pretrained(folder)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(folder, num_labels=2, trust_remote_code=True)
    texts = {"text": ["good", "bad", "very good indeed", "quite bad"], "label": [1, 0, 1, 0]}
    train = Dataset.from_dict(texts).map(lambda row: tokenizer(row["text"]), remove_columns=["text"])
    before = model.score.weight.detach().clone()
    args = TrainingArguments(
        output_dir=sys.argv[3], max_steps=1, per_device_train_batch_size=4, learning_rate=1e-2, use_cpu=True,
        report_to=[], save_strategy="no", logging_steps=1,
    )
    trainer = Trainer(model=model, args=args, train_dataset=train, data_collator=DataCollatorWithPadding(tokenizer))
    loss = trainer.train().training_loss
    trainer.save_model(sys.argv[3])
    reloaded = transformers.AutoModelForSequenceClassification.from_pretrained(sys.argv[3], trust_remote_code=True)
    results["trainer"] = {
        "loss": loss,
        "score_changed": not torch.equal(before, model.score.weight.detach()),
        "reloaded_equal": torch.equal(reloaded.score.weight, model.score.weight.detach()),
        "auto_map": json.loads((Path(sys.argv[3]) / "config.json").read_text())["auto_map"],
    }
    Path(sys.argv[2]).write_text(json.dumps(results))
    """
)


@pytest.fixture(scope="module")
def heads_without_hfzoo(tmp_path_factory, hfzoo_free_python) -> dict:
    """Pretrain one tiny model per family with the recipe (2 steps), then load each as every head of its family in a
    child process that cannot import hfzoo, running outside the repository with its own module cache."""
    from accelerate.state import AcceleratorState, GradientState

    from hfzoo.commands.pretrain import main

    root = tmp_path_factory.mktemp("heads")
    jobs = {}
    for family, (preset, objective, _) in PRETRAINED.items():
        try:
            output = main([
                "--config", str(RECIPE_CONFIG), "--preset", preset, "--objective", objective, "--max_steps", "2",
                "--eval_every", "2", "--save_every", "100", "--max_train_samples", "20", "--max_eval_samples", "4",
                "--output_dir", str(root / family),
            ])  # fmt: skip
        finally:
            GradientState._reset_state()
            AcceleratorState._reset_state(reset_partial_state=True)
        jobs[family] = (str(output), list(HEADS[family]))
    (root / "jobs.json").write_text(json.dumps(jobs))
    child = hfzoo_free_python.run(HEADS_CHILD, root, "jobs.json", "results.json", str(root / "fine-tuned"), timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    return {"root": root, "jobs": jobs, "results": json.loads((root / "results.json").read_text())}


@pytest.mark.parametrize("family", HEADS)
def test_every_head_loads_a_recipe_output_without_hfzoo(family, heads_without_hfzoo):
    folder = Path(heads_without_hfzoo["jobs"][family][0])
    auto_map = json.loads((folder / "config.json").read_text())["auto_map"]
    assert {name: ref.split(".")[-1] for name, ref in auto_map.items() if name != "AutoConfig"} == HEADS[family]
    own_auto_class = PRETRAINED[family][2]
    for auto_name, class_name in HEADS[family].items():
        result = heads_without_hfzoo["results"][f"{family}/{auto_name}"]
        assert result["class"] == class_name and result["module"].startswith("transformers_modules."), result
        assert result["outputs"], result
        # The pretrained encoder reaches every head: only a task head's own new weights start from scratch.
        assert all(not key.startswith("model.") for key in result["missing"]), (auto_name, result["missing"])
        if auto_name in (own_auto_class, "AutoModel", "AutoModelForTextEncoding"):  # bare models: nothing new
            assert result["missing"] == [], (auto_name, result["missing"])
    own = heads_without_hfzoo["results"][f"{family}/{own_auto_class}"]
    assert own["unexpected"] == [], own


def test_trainer_fine_tunes_a_head_without_hfzoo_and_saves_every_head(heads_without_hfzoo):
    trainer = heads_without_hfzoo["results"]["trainer"]
    assert math.isfinite(trainer["loss"]) and trainer["score_changed"] and trainer["reloaded_equal"]
    # Saved from the remote code, the fine-tuned folder names every head again, the classifier as its own.
    assert {name: ref.split(".")[-1] for name, ref in trainer["auto_map"].items() if name != "AutoConfig"} == HEADS["decoder"]
