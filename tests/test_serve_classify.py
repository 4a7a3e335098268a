"""`POST /v1/classify` of `hfzoo serve`: classification and tagging adapters trained by `hfzoo finetune` on real rows
(SST-2, RTE, CoNLL-2003) over one bert-tiny base, and an AdapterFusion of two of them trained by `hfzoo compose`,
served by a real server process and checked against each adapter alone through PEFT (and the fusion through
`load_composition`), as a user would load them; inputs for different adapters and heads are answered together."""

from __future__ import annotations

import asyncio
import json
import shutil
from pathlib import Path

import httpx
import pytest
import torch
from peft import PeftModel
from safetensors.torch import load_file, save_file
from tests.helpers.paths import SHARED_DATA
from tests.helpers.recipe_runs import run_finetune, run_recipe
from tests.helpers.serving import refused, serve_process, wait_until_serving
from transformers import AutoModelForSequenceClassification, AutoModelForTokenClassification, AutoTokenizer

from hfzoo.adapters import load_composition
from hfzoo.adapters.peft_warnings import building_peft_model
from hfzoo.commands import compose

MAX_LENGTH = 64
TASKS = {  # name -> the fine-tuning run's data arguments
    "sst2": ["--task", "sequence-classification", "--dataset", "sst2", "--text_column", "sentence",
             "--label_column", "label"],
    "rte": ["--task", "sequence-classification", "--dataset", "rte", "--text_column", "sentence1",
            "--text_pair_column", "sentence2", "--label_column", "label"],
    "ner": ["--task", "token-classification", "--dataset", "conll2003"],
}  # fmt: skip
SENTENCES = ["a gripping , beautifully made film", "dull , long and pointless", "EU rejects German call to boycott"]
PREMISE = "The film was made in France ."


@pytest.fixture(scope="module")
def adapters(checkpoints, tmp_path_factory) -> dict[str, Path]:
    """The base ("base") and three LoRA adapters of it, each 3 steps of `hfzoo finetune` at a high rate (so that
    their heads and deltas differ visibly), a copy of the SST-2 one ("sst2_copy") to add at run time, and the
    compose run of an AdapterFusion of the SST-2 and RTE adapters for RTE ("fusion")."""
    root = tmp_path_factory.mktemp("classify")
    folders = {"base": checkpoints["bert-tiny"]}
    for seed, (name, args) in enumerate(TASKS.items()):
        args = [arg if arg not in ("sst2", "rte", "conll2003") else str(SHARED_DATA / arg) for arg in args]
        folders[name] = run_finetune(
            "--model", folders["base"], *args, "--method", "lora", "--max_train_samples", "32", "--max_eval_samples",
            "8", "--max_length", MAX_LENGTH, "--per_device_batch_size", "8", "--max_steps", "3", "--learning_rate",
            "5e-2", "--seed", seed, "--output_dir", root / name,
        )  # fmt: skip
    folders["sst2_copy"] = Path(shutil.copytree(folders["sst2"], root / "sst2_copy"))
    rte = [arg if arg != "rte" else str(SHARED_DATA / "rte") for arg in TASKS["rte"]]
    folders["fusion"] = run_recipe(
        compose.main, "--model", folders["base"], *rte, "--adapters", f"sst2={folders['sst2']},rte={folders['rte']}",
        "--strategy", "fusion", "--baseline", "false", "--max_train_samples", "16", "--max_eval_samples", "8",
        "--max_length", MAX_LENGTH, "--per_device_batch_size", "8", "--max_steps", "2", "--learning_rate", "5e-2",
        "--output_dir", root / "fusion",
    )  # fmt: skip
    return folders


@pytest.fixture(scope="module")
def server(adapters) -> str:
    served = [arg for name in TASKS for arg in ("--adapter", f"{name}={adapters[name]}")]
    served += ["--composition", f"fusion={adapters['fusion']}"]
    with serve_process(str(adapters["base"]), "--max_wait_ms", "50", "--max_queue", "12", *served) as process:
        yield wait_until_serving(process)


def _alone(adapters: dict[str, Path], name: str, texts: list[str], pairs: list[str] | None = None) -> torch.Tensor:
    """Label probabilities of adapter `name` alone through PEFT, on the tokenizer's own layout of the inputs:
    [inputs, labels], or for tagging each word's first sub-token's, [words, labels] of the first input."""
    tokenizer = AutoTokenizer.from_pretrained(adapters["base"])
    tagging = name == "ner"
    auto_class = AutoModelForTokenClassification if tagging else AutoModelForSequenceClassification
    labels = _labels(adapters[name])
    model = auto_class.from_pretrained(adapters["base"], num_labels=len(labels), id2label=dict(enumerate(labels)))
    if name == "fusion":
        model = load_composition(model, adapters[name] / "composition").eval()
    else:
        with building_peft_model():
            model = PeftModel.from_pretrained(model, adapters[name]).eval()
    if tagging:
        words = texts[0].split()
        encoding = tokenizer(words, is_split_into_words=True, return_tensors="pt")
        firsts = {}
        for position, word in enumerate(encoding.word_ids()):
            if word is not None:
                firsts.setdefault(word, position)
        with torch.no_grad():
            probabilities = model(**encoding).logits.softmax(-1)[0]
        return probabilities[[firsts[i] for i in range(len(words))]]
    encoding = tokenizer(texts, pairs, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**encoding).logits.softmax(-1)


def _labels(folder: Path) -> list[str]:
    """The label names the fine-tuning run recorded."""
    id2label = json.loads((folder / "metrics.json").read_text())["model_kwargs"]["id2label"]
    return [id2label[str(i)] for i in range(len(id2label))]


def _classify(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/classify", json=body, timeout=60)


def test_models_lists_each_classifier_with_its_task_and_label_names(server, adapters):
    listed = {model["id"]: model for model in httpx.get(f"{server}/v1/models").json()["data"]}
    assert list(listed) == [str(adapters["base"]), *TASKS, "fusion"]
    assert listed["sst2"]["task"] == "sequence-classification" and listed["sst2"]["labels"] == ["0", "1"]
    assert listed["rte"]["labels"] == ["entailment", "not_entailment"]
    assert listed["ner"]["task"] == "token-classification" and "B-PER" in listed["ner"]["labels"]
    assert listed["fusion"]["composition"] == "fusion" and listed["fusion"]["labels"] == listed["rte"]["labels"]


def test_each_classifier_answers_as_its_adapter_alone_through_peft(server, adapters):
    sst2 = _classify(server, model="sst2", input=SENTENCES[:2]).json()
    expected = _alone(adapters, "sst2", SENTENCES[:2])
    for row, probabilities in zip(sst2["data"], expected):
        served = torch.tensor([row["probabilities"][label] for label in ("0", "1")])
        torch.testing.assert_close(served, probabilities, atol=2e-6, rtol=0)
        assert row["label"] == str(int(probabilities.argmax()))
    for name in ("rte", "fusion"):
        rte = _classify(server, model=name, input=PREMISE, text_pair=SENTENCES[0]).json()["data"][0]
        expected = _alone(adapters, name, [PREMISE], [SENTENCES[0]])[0]
        served = torch.tensor([rte["probabilities"][label] for label in ("entailment", "not_entailment")])
        torch.testing.assert_close(served, expected, atol=2e-6, rtol=0)
    ner = _classify(server, model="ner", input=SENTENCES[2]).json()["data"][0]["words"]
    expected = _alone(adapters, "ner", [SENTENCES[2]])
    labels = _labels(adapters["ner"])
    assert [word["word"] for word in ner] == SENTENCES[2].split()
    assert [word["label"] for word in ner] == [labels[int(p.argmax())] for p in expected]
    torch.testing.assert_close(torch.tensor([w["score"] for w in ner]), expected.max(-1).values, atol=2e-6, rtol=0)


def test_concurrent_inputs_for_three_adapters_and_two_heads_share_forwards(server):
    cases = [("sst2", {"input": SENTENCES[0]}), ("rte", {"input": PREMISE, "text_pair": SENTENCES[1]}),
             ("ner", {"input": SENTENCES[2]}), ("fusion", {"input": PREMISE, "text_pair": SENTENCES[1]})] * 3
    alone = [_classify(server, model=name, **body).json()["data"] for name, body in cases[:4]]

    async def all_at_once() -> list[dict]:
        async with httpx.AsyncClient() as client:
            responses = await asyncio.gather(*(client.post(f"{server}/v1/classify", json={"model": name, **body},
                                                           timeout=60) for name, body in cases))  # fmt: skip
        return [response.json()["data"] for response in responses]

    before = httpx.get(f"{server}/health").json()["classify_forwards"]
    together = asyncio.run(all_at_once())
    forwards = httpx.get(f"{server}/health").json()["classify_forwards"] - before
    for answer, expected in zip(together, alone * 3):
        for row, row_alone in zip(answer, expected):
            assert row.get("label") == row_alone.get("label")
            words, words_alone = row.get("words", []), row_alone.get("words", [])
            assert [(w["word"], w["label"]) for w in words] == [(w["word"], w["label"]) for w in words_alone]
            # scores are rounded to 6 places: a batched forward may land on the other side of a rounding boundary
            assert all(abs(w["score"] - a["score"]) <= 2e-6 for w, a in zip(words, words_alone))
            for label, probability in row.get("probabilities", {}).items():
                assert abs(probability - row_alone["probabilities"][label]) < 2e-6
    assert forwards <= len(cases) / 2, f"{forwards} forwards for {len(cases)} inputs: they were not batched"
    assert alone[1][0]["probabilities"] != alone[3][0]["probabilities"]  # the fusion is not the RTE adapter


def test_bad_classify_requests_are_refused_naming_the_field(server, adapters):
    assert "'nope'" in refused(_classify(server, model="nope", input="x"), 404, "model")
    assert "/v1/classify" in refused(httpx.post(f"{server}/v1/completions", json={"model": "sst2", "prompt": "x"}),
                                     400, "model")  # fmt: skip
    encoder = httpx.post(f"{server}/v1/completions", json={"model": str(adapters["base"]), "prompt": "x"})
    assert "encoder" in refused(encoder, 400, "model")
    refused(_classify(server, model="sst2", input="x", text_pair="y"), 400, "text_pair")
    refused(_classify(server, model="ner", input="x", text_pair="y"), 400, "text_pair")
    assert "text pairs" in refused(_classify(server, model="rte", input="x"), 400, "text_pair")
    refused(_classify(server, model="rte", input=["x", "y"], text_pair=["z"]), 400, "text_pair")
    refused(_classify(server, model="sst2", input=["fine", "  "]), 400, "input")
    assert f"{MAX_LENGTH} tokens" in refused(_classify(server, model="sst2", input="word " * 100), 400, "input")
    refused(_classify(server, model="sst2", input=[]), 400, "input")
    refused(_classify(server, model="sst2", input="x", labels=["a"]), 400, "labels")
    refused(_classify(server, model="sst2", input=["x"] * 13), 429, None)
    assert _classify(server, model="sst2", input=SENTENCES[0]).status_code == 200


def test_classifiers_are_added_and_removed_at_run_time(server, adapters, tmp_path):
    expected = _classify(server, model="sst2", input=SENTENCES).json()["data"]
    added = httpx.post(f"{server}/v1/adapters", json={"name": "sst2_copy", "path": str(adapters["sst2_copy"])},
                       timeout=60)  # fmt: skip
    assert added.status_code == 200, added.text
    assert _classify(server, model="sst2_copy", input=SENTENCES).json()["data"] == expected
    assert httpx.delete(f"{server}/v1/adapters/ner", timeout=60).status_code == 200  # its head's model goes too
    refused(_classify(server, model="ner", input="x"), 404, "model")
    back = httpx.post(f"{server}/v1/adapters", json={"name": "ner", "path": str(adapters["ner"])}, timeout=60)
    assert back.status_code == 200, back.text
    words = _classify(server, model="ner", input=SENTENCES[2]).json()["data"][0]["words"]
    labels = _labels(adapters["ner"])
    alone = _alone(adapters, "ner", SENTENCES[2:])
    assert [word["label"] for word in words] == [labels[int(p.argmax())] for p in alone]
    wrong = httpx.post(f"{server}/v1/adapters", json={"name": "other", "path": str(adapters["base"])}, timeout=60)
    refused(wrong, 409, "path")  # a model folder, no adapter: the server unchanged
    headless = tmp_path / "headless"  # the SST-2 LoRA without its head, as other tools could save it
    headless.mkdir()
    shutil.copy(adapters["sst2"] / "adapter_config.json", headless)
    weights = load_file(adapters["sst2"] / "adapter_model.safetensors")
    save_file({k: v for k, v in weights.items() if "lora_" in k}, headless / "adapter_model.safetensors")
    response = httpx.post(f"{server}/v1/adapters", json={"name": "headless", "path": str(headless)}, timeout=60)
    assert "saves no head of its own" in refused(response, 409, "path")
    assert _classify(server, model="sst2", input=SENTENCES).json()["data"] == expected
