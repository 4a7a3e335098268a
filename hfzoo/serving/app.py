"""The HTTP face of `hfzoo serve`: OpenAI-style completions over a base model and its adapters, and classification.

`model` in a request names the base (as given to `hfzoo serve`), an adapter or a saved composition; the
`BatchingEngine` decodes every completion request for the base and its adapters together (each generating
composition has an engine of its own, its rows batched with each other), the `ClassifyEngine` classifies every
`/v1/classify` input together. Every refusal is a JSON body `{"error": {"message": ..., "field": ...}}` naming the
field at fault (FastAPI's own 422 shape for a malformed body is replaced by a 400 of that shape), and the server
keeps serving.
"""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field

from ..adapters.composition import BASE
from .classification import ClassifyEngine, classifying_task
from .scheduler import AdapterInUse, BatchingEngine, QueueFull, Row


DISCONNECT_POLL_S = 0.25  # how often a request waiting for its completion checks that its client is still there


class ApiError(Exception):
    """A refusal answered as `{"error": {"message", "field"}}` with `status`."""

    def __init__(self, status: int, message: str, field: str | None = None) -> None:
        super().__init__(message)
        self.status, self.message, self.field = status, message, field


class CompletionBody(BaseModel):
    """`POST /v1/completions`: OpenAI's fields that hfzoo serves; any other field is refused, not ignored."""

    model_config = ConfigDict(extra="forbid")

    model: str
    prompt: str | list[str] = Field(min_length=1)
    max_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=1.0, ge=0)  # 0: greedy
    top_p: float = Field(default=1.0, gt=0, le=1)
    stop: str | list[str] | None = None
    stream: bool = False


class ClassifyBody(BaseModel):
    """`POST /v1/classify`: one text or several (and as many second texts, for pair tasks) for one adapter; a
    tagging adapter tags each text's words (split at whitespace)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input: str | list[str] = Field(min_length=1)
    text_pair: str | list[str] | None = None


class AdapterBody(BaseModel):
    """`POST /v1/adapters`: an adapter folder on the server's disk, served under `name`."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1)
    path: str = Field(min_length=1)


def _error(status: int, message: str, field: str | None) -> JSONResponse:
    return JSONResponse({"error": {"message": message, "field": field}}, status_code=status)


def create_app(engine: BatchingEngine | None, classify: ClassifyEngine, base_name: str, context_length: int,
               compositions: dict[str, BatchingEngine] | None = None) -> FastAPI:  # fmt: skip
    """The app serving `engine`'s model as `base_name` (and its adapters by their names; None for an encoder, which
    does not generate), the generating `compositions` by name, and `classify`'s classification adapters and
    compositions; a prompt and its completion fit in `context_length` tokens."""
    app = FastAPI(title="hfzoo serve")
    compositions = compositions or {}

    def generating() -> dict[str, str]:  # the engine replaces its dict as adapters come and go
        return engine.adapters if engine is not None else {}

    def served() -> str:
        return ", ".join([base_name, *generating(), *compositions, *classify.classifiers])

    @app.exception_handler(ApiError)
    async def api_error(request: Request, error: ApiError) -> JSONResponse:
        return _error(error.status, error.message, error.field)

    @app.exception_handler(RequestValidationError)
    async def malformed(request: Request, error: RequestValidationError) -> JSONResponse:
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"][1:]) or None  # loc starts with "body"
        return _error(400, f"malformed request body: {field or 'body'}: {first['msg']}", field)

    @app.get("/health")
    async def health() -> dict:
        """Alive, with the engine's load: prompts decoding and waiting, and forwards run so far."""
        engines = [e for e in [engine, *compositions.values()] if e is not None]
        decoding = {"decoding": sum(len(e.active) for e in engines), "waiting": sum(len(e.waiting) for e in engines),
                    "forward_steps": sum(e.steps for e in engines)} if engines else {}  # fmt: skip
        return {"status": "ok", **decoding, "classify_waiting": len(classify.waiting),
                "classify_forwards": classify.forwards}  # fmt: skip

    @app.get("/v1/models")
    async def models() -> dict:
        entries = [{"id": name, "object": "model", "owned_by": "hfzoo"} for name in [base_name, *generating()]]
        entries += [{"id": name, "object": "model", "owned_by": "hfzoo", "composition": e.model.strategy}
                    for name, e in compositions.items()]  # fmt: skip
        entries += [{"id": name, "object": "model", "owned_by": "hfzoo", "task": c.task.name, "labels": c.labels,
                     **({"composition": classify.models[c.head].strategy} if c.composition else {})}
                    for name, c in dict(classify.classifiers).items()]  # fmt: skip
        return {"object": "list", "data": entries}

    @app.post("/v1/adapters")
    async def add_adapter(body: AdapterBody) -> dict:
        if body.name in (base_name, *generating(), *compositions, *classify.classifiers):
            raise ApiError(409, f"a model named {body.name!r} is already served", "name")
        if not Path(body.path).is_dir():
            raise ApiError(400, f"{body.path} is not a folder on the server", "path")
        try:
            if classifying_task(body.path):
                await asyncio.wrap_future(classify.add(body.name, body.path))
            elif engine is None:
                raise ValueError(f"{base_name} is an encoder, which serves classification adapters only, and this "
                                 "adapter's task_type is neither SEQ_CLS nor TOKEN_CLS")  # fmt: skip
            else:
                await asyncio.wrap_future(engine.add_adapter(body.name, body.path))
        except (ValueError, OSError) as error:  # does not fit the base, or not an adapter folder
            raise ApiError(409, f"adapter {body.name!r} refused, nothing changed: {error}", "path") from None
        return {"id": body.name, "object": "model", "owned_by": "hfzoo"}

    @app.delete("/v1/adapters/{name}")
    async def remove_adapter(name: str) -> dict:
        if name not in generating() and name not in classify.classifiers:
            adapters = [*generating(), *classify.classifiers]
            raise ApiError(404, f"no adapter {name!r} is served (adapters: {', '.join(adapters)})", "name")
        try:
            if name in classify.classifiers:
                await asyncio.wrap_future(classify.remove(name))
            else:
                await asyncio.wrap_future(engine.remove_adapter(name))
        except (AdapterInUse, ValueError) as error:
            raise ApiError(409, str(error), "name") from None
        return {"id": name, "object": "model", "deleted": True}

    @app.post("/v1/classify")
    async def classify_route(body: ClassifyBody) -> dict:
        classifier = classify.classifiers.get(body.model)
        if classifier is None:
            if body.model in (base_name, *generating(), *compositions):
                raise ApiError(400, f"model {body.model!r} generates text: use POST /v1/completions", "model")
            raise ApiError(404, f"model {body.model!r} is not served (served: {served()})", "model")
        texts = [body.input] if isinstance(body.input, str) else body.input
        pairs = [body.text_pair] if isinstance(body.text_pair, str) else body.text_pair
        tagging = classifier.task.name == "token-classification"
        if pairs is not None and (tagging or classifier.pairs is False):
            raise ApiError(400, f"adapter {body.model!r} reads single texts: drop text_pair", "text_pair")
        if pairs is None and classifier.pairs:
            raise ApiError(400, f"adapter {body.model!r} was trained on text pairs: give text_pair", "text_pair")
        if pairs is not None and len(pairs) != len(texts):
            raise ApiError(400, f"{len(pairs)} text_pair for {len(texts)} inputs: give one per input", "text_pair")
        for field, values in (("input", texts), ("text_pair", pairs or [])):
            if empty := [i for i, text in enumerate(values) if not text.strip()]:
                raise ApiError(400, f"{field} {empty[0]} has no text", field)
        try:
            features = classifier.encode(texts, pairs)
            futures = classify.submit(classifier, features)
        except ValueError as error:
            raise ApiError(400, str(error), "input") from None
        except QueueFull as error:
            raise ApiError(429, f"the server is busy ({error}); retry later", None) from None
        except KeyError:  # removed since the check above
            raise ApiError(404, f"model {body.model!r} is not served", "model") from None
        try:
            results = [await asyncio.wrap_future(future) for future in futures]
        except Exception as error:
            raise ApiError(500, f"classification failed: {error}", None) from None
        labels = classifier.labels
        data = []
        for index, (text, feature, probabilities) in enumerate(zip(texts, features, results)):
            if tagging:  # each word's label is its first sub-token's, as the adapter was trained and evaluated
                firsts = {}
                for position, word in enumerate(feature["word_ids"]):
                    firsts.setdefault(word, position)
                words = [{"word": word, **_best(labels, probabilities[firsts[i]])}
                         for i, word in enumerate(text.split())]  # fmt: skip
                data.append({"index": index, "words": words})
            else:
                scores = {label: round(float(p), 6) for label, p in zip(labels, probabilities)}
                data.append({"index": index, **_best(labels, probabilities), "probabilities": scores})
        tokens = sum(len(feature["input_ids"]) for feature in features)
        return {"object": "list", "model": body.model, "data": data, "usage": {"prompt_tokens": tokens,
                "total_tokens": tokens}}  # fmt: skip

    @app.post("/v1/completions", response_model=None)  # a JSON body, or server-sent events when streaming
    async def completions(body: CompletionBody, request: Request) -> dict | Response:
        prompts = [body.prompt] if isinstance(body.prompt, str) else body.prompt
        stop = [body.stop] if isinstance(body.stop, str) else list(body.stop or [])
        if "" in stop:
            raise ApiError(400, "stop strings must not be empty", "stop")
        if body.model in classify.classifiers:
            raise ApiError(400, f"model {body.model!r} classifies: use POST /v1/classify", "model")
        if engine is None:
            raise ApiError(400, f"{base_name} is an encoder: it has no generating head; its classification adapters "
                                "answer POST /v1/classify", "model")  # fmt: skip
        if body.model not in (base_name, *engine.adapters, *compositions):
            raise ApiError(404, f"model {body.model!r} is not served (served: {served()})", "model")
        adapter = body.model if body.model in engine.adapters else BASE
        decoder = compositions.get(body.model, engine)
        loop, events = asyncio.get_running_loop(), asyncio.Queue()
        rows = []
        for index, prompt in enumerate(prompts):
            ids = engine.encode(prompt)
            if not ids:
                raise ApiError(400, f"prompt {index} has no tokens: give text to continue", "prompt")
            if len(ids) >= context_length:
                raise ApiError(400, f"prompt {index} has {len(ids)} tokens; the context holds {context_length}",
                               "prompt")  # fmt: skip
            if len(ids) + body.max_tokens > context_length:
                raise ApiError(400, f"max_tokens {body.max_tokens} with prompt {index}'s {len(ids)} tokens exceeds "
                                    f"the context of {context_length} tokens", "max_tokens")  # fmt: skip

            def emit(kind: str, value: str, index: int = index) -> None:
                loop.call_soon_threadsafe(events.put_nowait, (index, kind, value))

            rows.append(Row(ids, adapter, body.max_tokens, emit, body.temperature, body.top_p, stop))
        try:
            decoder.submit(rows)
        except QueueFull as error:
            raise ApiError(429, f"the server is busy ({error}); retry later", None) from None
        except KeyError:  # removed since the check above
            raise ApiError(404, f"model {body.model!r} is not served", "model") from None
        head = {"id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
                "model": body.model}  # fmt: skip
        if body.stream:
            return StreamingResponse(_stream(rows, events, head), media_type="text/event-stream")
        texts, reasons = [""] * len(rows), [None] * len(rows)
        checked = loop.time()
        try:
            while None in reasons:
                try:
                    index, kind, value = await asyncio.wait_for(events.get(), timeout=DISCONNECT_POLL_S)
                except TimeoutError:
                    kind = None
                if loop.time() - checked >= DISCONNECT_POLL_S:  # uvicorn does not cancel a request whose client left
                    if await request.is_disconnected():
                        return Response(status_code=499)  # nobody reads it; the rows leave the batch below
                    checked = loop.time()
                if kind == "error":
                    raise ApiError(500, value, None)
                if kind == "text":
                    texts[index] += value
                elif kind == "done":
                    reasons[index] = value
        finally:
            for row in rows:
                row.cancelled = True  # a client gone before the end: its rows leave the batch
        choices = [{"index": i, "text": text, "finish_reason": reason, "logprobs": None}
                   for i, (text, reason) in enumerate(zip(texts, reasons))]  # fmt: skip
        return {**head, "choices": choices, "usage": _usage(rows)}

    return app


async def _stream(rows: list[Row], events: asyncio.Queue, head: dict) -> AsyncIterator[str]:
    """Server-sent events: one per piece of text, one with each row's finish reason, then `[DONE]`. A client that
    goes away closes this generator, and its rows leave the batch."""
    left = len(rows)
    try:
        while left:
            index, kind, value = await events.get()
            if kind == "error":
                yield f"data: {json.dumps({'error': {'message': value, 'field': None}})}\n\n"
                break
            text, reason = (value, None) if kind == "text" else ("", value)
            left -= kind == "done"
            choice = {"index": index, "text": text, "finish_reason": reason, "logprobs": None}
            yield f"data: {json.dumps({**head, 'choices': [choice]})}\n\n"
        yield "data: [DONE]\n\n"
    finally:
        for row in rows:
            row.cancelled = True


def _usage(rows: list[Row]) -> dict:
    prompt, completion = sum(len(row.prompt_ids) for row in rows), sum(len(row.tokens) for row in rows)
    return {"prompt_tokens": prompt, "completion_tokens": completion, "total_tokens": prompt + completion}


def _best(labels: list[str], probabilities) -> dict:
    best = int(probabilities.argmax())
    return {"label": labels[best], "score": round(float(probabilities[best]), 6)}
