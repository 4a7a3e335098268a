"""`hfzoo serve` as a user runs it: a real server process on a free port, queried with a real HTTP client.

Each greedy completion is checked against `hfzoo generate` with that adapter alone, so batching requests of different
adapters together (and joining the batch between decoding steps) changes nothing but the speed.
"""

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
import torch
from peft import LoraConfig, PeftModel, get_peft_model
from tests.helpers.serving import refused, serve_process, wait_until_serving
from tests.helpers.tiny_checkpoints import random_lora
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from hfzoo.adapters import compose
from hfzoo.adapters.peft_warnings import building_peft_model
from hfzoo.cli import main
from hfzoo.core.refusals import Refusal
from hfzoo.generation import GenerationRequest, generate_text, load_for_generation
from hfzoo.tasks.task import gpt_input_ids

ADAPTERS = ("a", "b", "c")
CONTEXT = 64  # the served model's max_position_embeddings
MAX_QUEUE = 20
PROMPTS = ("Return a new list", "The module")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model, tokenizer, tokenizer_overrides) -> dict[str, Path]:
    """The base model folder ("base"), three LoRAs of it, a fourth added at run time ("d"), a LoRA of a wider
    model that does not fit it ("wide"), a saved soft composition of "a" and "b" ("mix": its routers zero, so
    an even mixture), and a 3-label sequence-classification LoRA saved by PEFT itself ("label": no hfzoo run
    files, so transformers' label names and the model's context as its longest input)."""
    root = tmp_path_factory.mktemp("serve")
    sizes = {**tokenizer_overrides, "max_position_embeddings": CONTEXT}
    tiny_model("gpt-tiny", **sizes).save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    paths = {"base": root / "base"}
    for seed, name in enumerate((*ADAPTERS, "d"), 1):
        paths[name] = random_lora(tiny_model("gpt-tiny", **sizes), root / name, seed)
    wide = tiny_model("gpt-tiny", **sizes, hidden_size=64, intermediate_size=128)
    paths["wide"] = random_lora(wide, root / "wide", 0)
    compose(tiny_model("gpt-tiny", **sizes), {"a": paths["a"], "b": paths["b"]}, "soft").save_pretrained(root / "mix")
    paths["mix"] = root / "mix"
    torch.manual_seed(0)
    classifier = tiny_model("gpt-tiny", AutoModelForSequenceClassification, num_labels=3, **sizes)
    config = LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=32, init_lora_weights=False)
    with building_peft_model():
        get_peft_model(classifier, config).save_pretrained(root / "label")
    paths["label"] = root / "label"
    return paths


@pytest.fixture(scope="module")
def server_process(folders) -> subprocess.Popen:
    """`hfzoo serve` over the base and adapters a, b, c in its own process, started before the reference generations
    (`expected`) so that its start-up overlaps them."""
    adapters = [arg for name in ADAPTERS for arg in ("--adapter", f"{name}={folders[name]}")]
    with serve_process(str(folders["base"]), "--max_batch_size", "8", "--max_wait_ms", "20", "--max_queue",
                       str(MAX_QUEUE), *adapters, "--composition", f"mix={folders['mix']}", "--adapter",
                       f"label={folders['label']}") as process:  # fmt: skip
        yield process


@pytest.fixture(scope="module")
def server(server_process, expected) -> str:
    """The URL of the running server, once it answers /health."""
    return wait_until_serving(server_process)


@pytest.fixture(scope="module")
def expected(folders, server_process) -> dict[tuple[str, str], str]:
    """(model, prompt) -> the greedy completion (12 new tokens) `hfzoo generate` gives with that adapter alone."""
    answers = {}
    for name in ("base", *ADAPTERS, "d", "mix"):
        adapters = {} if name in ("base", "mix") else {name: str(folders[name])}
        composition = str(folders["mix"]) if name == "mix" else None
        model, tokenizer, family = load_for_generation(str(folders["base"]), adapters, composition)
        for prompt in PROMPTS:
            request = GenerationRequest(prompts=[prompt], max_new_tokens=12)
            answers[name, prompt] = generate_text(model, tokenizer, family, request, stream=False)[0]
        if adapters or composition:
            model.unload()
    return answers


def _model(name: str, folders) -> str:
    return str(folders["base"]) if name == "base" else name


def _complete(url: str, **body) -> httpx.Response:
    return httpx.post(f"{url}/v1/completions", json={"max_tokens": 12, "temperature": 0, **body}, timeout=60)


def test_models_lists_the_base_its_adapters_and_the_composition(server, folders):
    listed = httpx.get(f"{server}/v1/models").json()["data"]
    assert [model["id"] for model in listed] == [str(folders["base"]), *ADAPTERS, "mix", "label"]
    assert listed[-2]["composition"] == "soft"
    assert listed[-1]["task"] == "sequence-classification" and listed[-1]["labels"] == ["LABEL_0", "LABEL_1", "LABEL_2"]


def test_a_decoders_classification_adapter_answers_as_through_peft_alone(server, folders):
    """Two inputs of different lengths in one forward (padded): each as the adapter alone gives it unpadded."""
    tokenizer = AutoTokenizer.from_pretrained(folders["base"])
    model = AutoModelForSequenceClassification.from_pretrained(folders["base"], num_labels=3)
    with building_peft_model():
        model = PeftModel.from_pretrained(model, folders["label"]).eval()
    texts = ["Return a new list of the items.", "The module"]
    response = httpx.post(f"{server}/v1/classify", json={"model": "label", "input": texts}, timeout=60)
    assert response.status_code == 200, response.text
    for text, row in zip(texts, response.json()["data"]):
        ids = gpt_input_ids(tokenizer, [text], CONTEXT)[0]
        with torch.no_grad():
            alone = model(input_ids=torch.tensor([ids])).logits.softmax(-1)[0]
        served = torch.tensor([row["probabilities"][f"LABEL_{i}"] for i in range(3)])
        torch.testing.assert_close(served, alone, atol=2e-6, rtol=0)
    too_long = {"model": "label", "input": "word " * CONTEXT}
    assert f"{CONTEXT} tokens" in refused(httpx.post(f"{server}/v1/classify", json=too_long), 400, "input")
    refused(_complete(server, model="label", prompt="x"), 400, "model")
    refused(httpx.post(f"{server}/v1/classify", json={"model": "a", "input": "x"}), 400, "model")


def test_greedy_completion_of_each_adapter_and_the_composition_equals_generate_alone(server, folders, expected):
    texts = {name: expected[name, PROMPTS[0]] for name in ("base", *ADAPTERS, "mix")}
    assert len(set(texts.values())) == 5, f"the adapters must change the continuation: {texts}"
    for name in ("base", *ADAPTERS, "mix"):
        response = _complete(server, model=_model(name, folders), prompt=list(PROMPTS))
        assert response.status_code == 200, response.text
        body = response.json()
        assert [choice["text"] for choice in body["choices"]] == [expected[name, prompt] for prompt in PROMPTS]
        assert body["usage"]["completion_tokens"] > 0


def test_a_stop_string_ends_the_completion_before_it(server, expected):
    text = expected["a", PROMPTS[0]]
    stop = text[3:6]
    choice = _complete(server, model="a", prompt=PROMPTS[0], stop=[stop]).json()["choices"][0]
    assert (choice["text"], choice["finish_reason"]) == (text[: text.index(stop)], "stop")


def test_sixteen_concurrent_clients_each_get_their_own_adapters_answer(server, folders, expected):
    cases = [(name, prompt) for name in ("base", *ADAPTERS) for prompt in PROMPTS] * 2

    async def ask(client: httpx.AsyncClient, name: str, prompt: str) -> dict:
        body = {"model": _model(name, folders), "prompt": prompt, "max_tokens": 12, "temperature": 0}
        response = await client.post(f"{server}/v1/completions", json=body, timeout=60)
        assert response.status_code == 200, response.text
        return response.json()

    async def all_at_once() -> list[dict]:
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(*(ask(client, name, prompt) for name, prompt in cases))

    assert len(cases) == 16
    steps = httpx.get(f"{server}/health").json()["forward_steps"]
    answers = asyncio.run(all_at_once())
    assert [answer["choices"][0]["text"] for answer in answers] == [expected[case] for case in cases]
    one_at_a_time = sum(answer["usage"]["completion_tokens"] for answer in answers)  # a forward per token and row
    forwards = httpx.get(f"{server}/health").json()["forward_steps"] - steps
    assert forwards <= one_at_a_time / 2, f"{forwards} forwards for {one_at_a_time} tokens: rows were not batched"


def _events(url: str, **body) -> list[str]:
    with httpx.stream("POST", f"{url}/v1/completions", timeout=60,
                      json={"max_tokens": 12, "temperature": 0, "stream": True, **body}) as response:  # fmt: skip
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        return [line.removeprefix("data: ") for line in response.iter_lines() if line]


def test_streaming_gives_the_same_text_and_ends_with_done(server, expected):
    events = _events(server, model="b", prompt=PROMPTS[1])
    assert events[-1] == "[DONE]"
    choices = [json.loads(event)["choices"][0] for event in events[:-1]]
    assert "".join(choice["text"] for choice in choices) == expected["b", PROMPTS[1]]
    assert choices[-1]["finish_reason"] in ("stop", "length")


def _forwards_once_idle(url: str) -> int:
    """The server's forward count once no row is decoding or waiting."""
    deadline = time.monotonic() + 30
    while True:
        health = httpx.get(f"{url}/health").json()
        if health["decoding"] == health["waiting"] == 0:
            return health["forward_steps"]
        assert time.monotonic() < deadline, f"rows still decoding after 30 s: {health}"
        time.sleep(0.05)


def test_a_client_gone_mid_stream_leaves_the_batch_and_the_server_serving(server, expected):
    max_tokens = CONTEXT - 16
    body = {"model": "c", "prompt": [PROMPTS[0]] * 8, "max_tokens": max_tokens, "temperature": 0, "stream": True}
    before = _forwards_once_idle(server)
    with httpx.stream("POST", f"{server}/v1/completions", json=body, timeout=60) as response:
        next(response.iter_lines())  # one event, then the client hangs up
    assert _forwards_once_idle(server) - before < max_tokens, "the rows of a client gone decoded to the end"
    assert _complete(server, model="c", prompt=PROMPTS[0]).json()["choices"][0]["text"] == expected["c", PROMPTS[0]]


def test_bad_requests_are_refused_naming_the_field_and_the_server_keeps_serving(server, folders, expected):
    assert "'z'" in refused(_complete(server, model="z", prompt="x"), 404, "model")
    assert "context" in refused(_complete(server, model="a", prompt="word " * (2 * CONTEXT)), 400, "prompt")
    refused(_complete(server, model="a", prompt="x", max_tokens=0), 400, "max_tokens")
    refused(_complete(server, model="a", prompt="x", max_tokens=CONTEXT), 400, "max_tokens")
    refused(_complete(server, model="a", prompt="x", top_p=2), 400, "top_p")
    refused(_complete(server, model="a", prompt="x", best_of=2), 400, "best_of")
    refused(_complete(server, prompt="x"), 400, "model")
    json_header = {"content-type": "application/json"}
    malformed = httpx.post(f"{server}/v1/completions", content=b"{not json", headers=json_header)
    assert malformed.status_code == 400 and "error" in malformed.json()
    refused(_complete(server, model="a", prompt=["x"] * (MAX_QUEUE + 1)), 429, None)
    assert _complete(server, model="a", prompt=PROMPTS[0]).json()["choices"][0]["text"] == expected["a", PROMPTS[0]]


def test_adapters_are_added_and_removed_at_run_time(server, folders, expected):
    models = f"{server}/v1/models"
    added = httpx.post(f"{server}/v1/adapters", json={"name": "d", "path": str(folders["d"])}, timeout=60)
    assert added.status_code == 200, added.text
    assert [model["id"] for model in httpx.get(models).json()["data"]][-3:] == ["d", "mix", "label"]
    assert _complete(server, model="d", prompt=PROMPTS[0]).json()["choices"][0]["text"] == expected["d", PROMPTS[0]]
    wide = httpx.post(f"{server}/v1/adapters", json={"name": "wide", "path": str(folders["wide"])}, timeout=60)
    refused(wide, 409, "path")
    refused(httpx.post(f"{server}/v1/adapters", json={"name": "a", "path": str(folders["d"])}), 409, "name")
    refused(httpx.post(f"{server}/v1/adapters", json={"name": "mix", "path": str(folders["d"])}), 409, "name")
    assert len(httpx.get(models).json()["data"]) == 7  # unchanged by the refusals
    assert httpx.delete(f"{server}/v1/adapters/d", timeout=60).status_code == 200
    refused(_complete(server, model="d", prompt="x"), 404, "model")
    refused(httpx.delete(f"{server}/v1/adapters/d"), 404, "name")
    for name in ADAPTERS:  # the others still answer as before
        text = _complete(server, model=name, prompt=PROMPTS[1]).json()["choices"][0]["text"]
        assert text == expected[name, PROMPTS[1]]


def test_the_openai_client_gets_the_same_completions_and_stream(server, expected):
    openai = pytest.importorskip("openai", reason="the openai client is a dev extra")
    client = openai.OpenAI(base_url=f"{server}/v1", api_key="unused", max_retries=0)
    completion = client.completions.create(model="a", prompt=PROMPTS[0], max_tokens=12, temperature=0)
    assert completion.choices[0].text == expected["a", PROMPTS[0]] and completion.usage.completion_tokens > 0
    stream = client.completions.create(model="mix", prompt=PROMPTS[1], max_tokens=12, temperature=0, stream=True)
    assert "".join(chunk.choices[0].text for chunk in stream) == expected["mix", PROMPTS[1]]
    with pytest.raises(openai.NotFoundError, match="'z' is not served"):
        client.completions.create(model="z", prompt="x", max_tokens=2)


def test_sampling_answers_within_max_tokens(server):
    body = _complete(server, model="b", prompt=PROMPTS[0], temperature=1.0, top_p=0.9, max_tokens=5).json()
    assert body["usage"]["completion_tokens"] <= 5 and body["choices"][0]["finish_reason"] in ("stop", "length")


def test_serve_without_its_extra_is_refused_naming_it(monkeypatch, folders, capsys):
    monkeypatch.setitem(sys.modules, "uvicorn", None)  # what importlib finds where uvicorn is not installed
    with pytest.raises(Refusal):
        main(["serve", str(folders["base"])])
    assert "pip install 'hfzoo[serve]'" in capsys.readouterr().err
