"""The batching engine of `hfzoo serve`: one thread decodes every request, whatever adapter each names, together.

Rows (one per prompt) that arrive within `max_wait_ms` of an idle engine start as one batch; each row names its
adapter and the fixed-routing composition (`hfzoo.generation.compose_fixed`, the path `hfzoo generate
--adapter_names` takes) applies them per row in one forward. Decoding goes step by step on a KV cache. A row leaves
the batch when it ends (eos, a stop string, `max_tokens`, or its client went away), its cache row dropped; rows that
arrive meanwhile join between two steps by **re-prefill**: the batch's rows (prompt and the tokens generated so far)
are left-padded and run through one prefill that builds a fresh cache. Re-prefilling costs one forward over the
batch's tokens per join, and keeps the cache a plain transformers `DynamicCache` (no merging of caches of different
lengths); position ids follow each row's own tokens, so a row continues exactly as it would alone.
"""

from __future__ import annotations

import inspect
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from ..adapters.composition import BASE, ComposedModel
from ..generation import compose_fixed


class QueueFull(Exception):
    """More rows than `max_queue` would be waiting or decoding."""


class AdapterInUse(Exception):
    """An adapter that queued or decoding rows still name cannot be removed."""


@dataclass(eq=False)  # rows are compared by identity
class Row:
    """One prompt's completion. `emit(kind, value)` is called from the engine's thread: ("text", new text),
    ("done", finish reason) or ("error", message); `cancelled` is set by the server when its client went away."""

    prompt_ids: list[int]
    adapter: str  # an adapter name, or BASE
    max_tokens: int
    emit: Callable[[str, str], None]
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    tokens: list[int] = field(default_factory=list)
    sent: int = 0  # characters of the completion already emitted
    cancelled: bool = False


class EngineThread:
    """The one thread that owns a served model: it runs every forward and, between two of them, every change of the
    model (`_between_steps`: adding or removing an adapter), so a forward never sees a half-changed model. Work
    queues in `waiting`; an idle engine gives more of it `max_wait` to arrive and join the first."""

    def __init__(self, max_batch_size: int, max_wait_ms: float, max_queue: int) -> None:
        self.max_batch_size, self.max_wait, self.max_queue = max_batch_size, max_wait_ms / 1000, max_queue
        self.condition = threading.Condition()
        self.waiting: deque = deque()
        self.tasks: deque[tuple[Callable[[], Any], Future]] = deque()

    def _start(self, name: str) -> None:
        """Start the thread (at the end of a subclass's `__init__`, its state complete)."""
        threading.Thread(target=self._loop, name=name, daemon=True).start()

    def _between_steps(self, task: Callable[[], Any]) -> Future:
        future: Future = Future()
        with self.condition:
            self.tasks.append((task, future))
            self.condition.notify()
        return future

    def _next_work(self, busy: bool) -> None:
        """Called with `condition` held: wait until there is work (`busy`: the engine's own, e.g. rows decoding), run
        the queued changes, and if not busy wait up to `max_wait` for a full batch."""
        while not (self.waiting or busy or self.tasks):
            self.condition.wait()
        while self.tasks:
            task, future = self.tasks.popleft()
            try:
                future.set_result(task())
            except Exception as error:  # handed to the request that asked for the change
                future.set_exception(error)
        if not busy and self.waiting:
            deadline = time.monotonic() + self.max_wait
            while len(self.waiting) < self.max_batch_size and time.monotonic() < deadline:
                self.condition.wait(deadline - time.monotonic())

    def _loop(self) -> None:
        raise NotImplementedError


class BatchingEngine(EngineThread):
    """Holds the model (base with its adapters composed for fixed routing) and decodes all rows on its thread."""

    def __init__(
        self,
        model: PreTrainedModel | ComposedModel,
        tokenizer: PreTrainedTokenizerBase,
        adapters: Mapping[str, str],
        max_batch_size: int = 16,
        max_wait_ms: float = 10.0,
        max_queue: int = 256,
    ) -> None:
        super().__init__(max_batch_size, max_wait_ms, max_queue)
        self.model, self.tokenizer, self.adapters = model, tokenizer, dict(adapters)
        # the ids `generate()` stops at (the model's generation config), so that a completion ends where it would
        eos = model.generation_config.eos_token_id
        eos = tokenizer.eos_token_id if eos is None else eos
        self.eos_token_ids = set(eos) if isinstance(eos, list) else {eos}
        self.pad_token_id = tokenizer.pad_token_id
        base = model.base_model if isinstance(model, ComposedModel) else model
        # a prefill needs the logits of the last position only (as generate() asks, where the model takes it)
        takes_keep = "logits_to_keep" in inspect.signature(base.forward).parameters
        self.last_logits = {"logits_to_keep": 1} if takes_keep else {}
        self.device = next(model.parameters()).device
        # fast tokenizers refuse concurrent use ("Already borrowed"): the server encodes, this thread decodes
        self.tokenizer_lock = threading.Lock()
        self.active: list[Row] = []
        self.cache: DynamicCache | None = None
        self.mask = torch.zeros(0, 0, dtype=torch.long)
        self.steps = 0  # forwards run, for tests and logs
        self._start("hfzoo-serve-engine")

    # ---------------------------------------------------------------------------------------- called by the server
    def encode(self, text: str) -> list[int]:
        with self.tokenizer_lock:
            return self.tokenizer(text)["input_ids"]

    def submit(self, rows: list[Row]) -> None:
        """Queue `rows`; raises `QueueFull` (nothing queued) past `max_queue`, `KeyError` for an unknown adapter."""
        with self.condition:
            unknown = [row.adapter for row in rows if row.adapter != BASE and row.adapter not in self.adapters]
            if unknown:
                raise KeyError(unknown[0])
            if len(self.waiting) + len(self.active) + len(rows) > self.max_queue:
                raise QueueFull(f"{len(self.waiting) + len(self.active)} prompts are queued or decoding")
            self.waiting.extend(rows)
            self.condition.notify()

    def add_adapter(self, name: str, path: str) -> Future:
        """Compose `name` (folder `path`) with the others; a refusal leaves the served model as it was."""
        return self._between_steps(lambda: self._set_adapters({**self.adapters, name: path}))

    def remove_adapter(self, name: str) -> Future:
        def remove() -> None:
            if any(row.adapter == name for row in (*self.waiting, *self.active)):
                raise AdapterInUse(f"adapter {name!r} is still named by queued or decoding requests; retry when done")
            self._set_adapters({key: path for key, path in self.adapters.items() if key != name})

        return self._between_steps(remove)

    # ------------------------------------------------------------------------------------------ the engine thread
    def _set_adapters(self, adapters: dict[str, str]) -> None:
        base = self.model.unload() if isinstance(self.model, ComposedModel) else self.model
        try:
            self.model = compose_fixed(base, adapters)
        except Exception:
            self.model = compose_fixed(base, self.adapters)
            raise
        self.adapters = adapters

    def _loop(self) -> None:
        while True:
            with self.condition:
                self._next_work(busy=bool(self.active))
                joining = []
                while self.waiting and len(self.active) + len(joining) < self.max_batch_size:
                    joining.append(self.waiting.popleft())
            try:
                self._step(joining)
            except Exception as error:  # a failed forward fails its rows, not the server
                for row in self.active + [row for row in joining if row not in self.active]:
                    row.emit("error", f"generation failed: {error}")
                self.active, self.cache = [], None

    def _step(self, joining: list[Row]) -> None:
        self._drop([row for row in self.active if not row.cancelled])
        joining = [row for row in joining if not row.cancelled]
        if not self.active and not joining:
            return
        routing = {"adapter_names": [row.adapter for row in self.active + joining]}
        if not isinstance(self.model, ComposedModel) or self.model.strategy != "fixed":
            routing = {}  # the base alone, or a saved composition that routes (or fuses) by itself
        with torch.inference_mode():
            if joining:
                logits = self._prefill(self.active + joining, routing)
                self.active = self.active + joining
            else:
                logits = self._decode(routing)
        self.steps += 1
        tokens = [self._sample(row, row_logits) for row, row_logits in zip(self.active, logits)]
        ended = [self._advance(row, token) for row, token in zip(self.active, tokens)]
        self._drop([row for row, end in zip(self.active, ended) if not end])

    def _prefill(self, rows: list[Row], routing: dict) -> torch.Tensor:
        sequences = [row.prompt_ids + row.tokens for row in rows]
        width = max(map(len, sequences))
        ids = torch.tensor([[self.pad_token_id] * (width - len(s)) + s for s in sequences], device=self.device)
        self.mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=self.device)
        positions = (self.mask.cumsum(-1) - 1).clamp(min=0)
        self.cache = DynamicCache(config=self.model.config)
        return self._forward(ids, positions, routing)

    def _decode(self, routing: dict) -> torch.Tensor:
        ids = torch.tensor([[row.tokens[-1]] for row in self.active], device=self.device)
        positions = self.mask.sum(-1, keepdim=True)  # each row's count of real tokens so far
        self.mask = torch.cat([self.mask, torch.ones_like(ids)], dim=-1)
        return self._forward(ids, positions, routing)

    def _forward(self, ids: torch.Tensor, positions: torch.Tensor, routing: dict) -> torch.Tensor:
        """The next-token logits of each row, the cache extended by `ids`."""
        out = self.model(input_ids=ids, attention_mask=self.mask, position_ids=positions, past_key_values=self.cache,
                         use_cache=True, **self.last_logits, **routing)  # fmt: skip
        return out.logits[:, -1].float()

    def _drop(self, keep: list[Row]) -> None:
        """Keep only the rows `keep` of the batch, and their cache rows."""
        if len(keep) == len(self.active):
            return
        index = torch.tensor([i for i, row in enumerate(self.active) if row in keep], device=self.device)
        self.active = keep
        if keep and self.cache is not None:
            self.cache.batch_select_indices(index)
            self.mask = self.mask[index]
        else:
            self.cache = None

    @staticmethod
    def _sample(row: Row, logits: torch.Tensor) -> int:
        """Greedy at temperature 0 (as `hfzoo generate` without --do_sample), else nucleus sampling."""
        if row.temperature == 0:
            return int(logits.argmax())
        probs = torch.softmax(logits / row.temperature, dim=-1)
        if row.top_p < 1:
            sorted_probs, order = probs.sort(descending=True)
            outside = sorted_probs.cumsum(-1) - sorted_probs > row.top_p  # keeps the first token past top_p
            probs = probs.scatter(0, order, sorted_probs.masked_fill(outside, 0))
        return int(torch.multinomial(probs, 1))

    def _advance(self, row: Row, token: int) -> bool:
        """Append `token` to `row` and emit its new text; whether the row has ended."""
        if token in self.eos_token_ids:
            return self._finish(row, "stop", self._text(row))
        row.tokens.append(token)
        text = self._text(row)
        ends = [index for index in (text.find(stop) for stop in row.stop) if index >= 0]
        if ends:
            return self._finish(row, "stop", text[: min(ends)])
        if len(row.tokens) >= row.max_tokens:
            return self._finish(row, "length", text)
        # hold back what could still become a stop string, and a character whose bytes are not all decoded yet
        safe = len(text) - max((len(stop) - 1 for stop in row.stop), default=0)
        while safe > row.sent and text[safe - 1] == "\ufffd":
            safe -= 1
        if safe > row.sent:
            row.emit("text", text[row.sent : safe])
            row.sent = safe
        return False

    def _finish(self, row: Row, reason: str, text: str) -> bool:
        if len(text) > row.sent:
            row.emit("text", text[row.sent :])
        row.emit("done", reason)
        return True

    def _text(self, row: Row) -> str:
        with self.tokenizer_lock:
            return self.tokenizer.decode(row.tokens, skip_special_tokens=True)
