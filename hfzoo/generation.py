"""Text in, text out: `hfzoo generate` on any hfzoo or native causal / sequence-to-sequence model.

Task adapters are served as a "fixed" composition (`hfzoo.adapters.compose`), so prompts that each name a different
adapter run in one batch with one forward per step; a saved composition of any strategy works the same way.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

import torch
from transformers import (
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.generation.configuration_utils import CompileConfig
from transformers.generation.streamers import BaseStreamer, TextStreamer

from .adapters import compose, load_composition
from .adapters.composition import BASE, ComposedModel
from .core.cpu_layout import tune_for_cpu
from .integrations.transformers import compile_on_every_device
from .models.checkpoint_files import check_checkpoint_folder
from .tasks.task import gpt_input_ids, model_family

PROMPT_FORMATS = ("plain", "task")


@dataclass
class GenerationRequest:
    """What `hfzoo generate` was asked for; the sampling fields are `generate()`'s own keyword arguments."""

    prompts: list[str]
    adapter_names: list[str] | None = None
    prompt_format: str = "plain"
    max_new_tokens: int = 50
    sampling: dict = field(default_factory=dict)  # do_sample, temperature, top_k, top_p, num_beams, ...
    static_cache: bool = False
    compile: bool = False


def load_for_generation(
    model_path: str,
    adapters: Mapping[str, str] | None = None,
    composition: str | None = None,
    device: str = "cpu",
) -> tuple[PreTrainedModel | ComposedModel, PreTrainedTokenizerBase, str]:
    """The model (with its adapters composed for fixed routing, or a saved composition), its tokenizer and family."""
    if adapters and composition:
        raise ValueError("give either --adapter NAME=PATH (fixed routing) or --composition PATH, not both")
    if Path(model_path).is_dir():  # a missing, truncated or pickled (`pytorch_model.bin`) weights file is refused
        check_checkpoint_folder(model_path)
    config = AutoConfig.from_pretrained(model_path)
    family = model_family(config)
    if family == "encoder":
        raise ValueError(
            f"{model_path} is an encoder ({config.model_type}): it has no generating head; "
            "hfzoo generate takes a causal LM or a sequence-to-sequence model"
        )
    auto_class = AutoModelForSeq2SeqLM if family == "encoder_decoder" else AutoModelForCausalLM
    model = auto_class.from_pretrained(model_path, dtype=torch.float32, use_safetensors=True)  # never a pickle
    model = tune_for_cpu(model.to(device).eval())
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if family == "decoder":
        tokenizer.padding_side = "left"  # every row's continuation starts at the same position
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if adapters:
        model = compose(model, dict(adapters), strategy="fixed")
    elif composition:
        model = load_composition(model, composition)
    return model, tokenizer, family


def resolve_adapter_names(
    model: PreTrainedModel | ComposedModel, count: int, names: Sequence[str] | None
) -> list[str] | None:
    """One adapter name per prompt for a fixed composition: given, or the only adapter for every prompt."""
    fixed = isinstance(model, ComposedModel) and model.strategy == "fixed"
    if not fixed:
        if names:
            raise ValueError(
                "--adapter_names picks an adapter per prompt: it needs --adapter NAME=PATH (or a fixed composition)"
            )
        return None
    if not names:
        if len(model.adapter_names) > 1:
            raise ValueError(
                f"{len(model.adapter_names)} adapters are loaded ({', '.join(model.adapter_names)}): "
                f"say which one each prompt uses with --adapter_names (one per prompt, or {BASE!r} for none)"
            )
        names = model.adapter_names
    if len(names) == 1:
        return list(names) * count
    if len(names) != count:
        raise ValueError(
            f"--adapter_names gives {len(names)} names for {count} prompts: give one per prompt, or one for all"
        )
    return list(names)


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], family: str, prompt_format: str
) -> dict[str, torch.Tensor]:
    """The batch of prompts; `task` formats them as `hfzoo finetune --task seq2seq` trained on them
    (a decoder's `bos source delim`), `plain` tokenizes them as the tokenizer does by default."""
    if prompt_format not in PROMPT_FORMATS:
        raise ValueError(f"--prompt_format {prompt_format!r}: choose one of {', '.join(PROMPT_FORMATS)}")
    if prompt_format == "plain" or family == "encoder_decoder":
        return tokenizer(list(prompts), return_tensors="pt", padding=True)
    limit = tokenizer.model_max_length
    rows = [{"input_ids": gpt_input_ids(tokenizer, [prompt, ""], limit, end=False)[0]} for prompt in prompts]
    return tokenizer.pad(rows, return_tensors="pt")


class PromptStreamer(TextStreamer):
    """transformers' `TextStreamer` (one row, word by word, without the prompt), writing to `out`."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, out: TextIO):
        super().__init__(tokenizer, skip_prompt=True, skip_special_tokens=True)
        self.out = out

    def on_finalized_text(self, text: str, stream_end: bool = False) -> None:
        print(text, end="\n" if stream_end else "", file=self.out, flush=True)


class RowStreamer(BaseStreamer):
    """Prints each prompt's completion as soon as that row ends (its eos), the rest when generation ends.

    transformers' `TextStreamer` takes one row; with a batch, a row is only readable once it is whole.
    """

    def __init__(
        self, tokenizer: PreTrainedTokenizerBase, labels: Sequence[str], eos_token_id: int | None, out: TextIO
    ):
        self.tokenizer, self.labels, self.eos_token_id, self.out = tokenizer, list(labels), eos_token_id, out
        self.tokens: list[list[int]] = [[] for _ in labels]
        self.done = [False] * len(labels)
        self.prompt_seen = False

    def put(self, value: torch.Tensor) -> None:
        if not self.prompt_seen:  # generate's first call hands over the prompts
            self.prompt_seen = True
            return
        for row, token in enumerate(value.reshape(len(self.labels), -1)[:, -1].tolist()):
            if self.done[row]:
                continue
            if token == self.eos_token_id:
                self._print(row)
            else:
                self.tokens[row].append(token)

    def end(self) -> None:
        for row in range(len(self.labels)):
            if not self.done[row]:
                self._print(row)

    def _print(self, row: int) -> None:
        self.done[row] = True
        text = self.tokenizer.decode(self.tokens[row], skip_special_tokens=True)
        print(f"{self.labels[row]}{text}", file=self.out, flush=True)


def generate_text(
    model: PreTrainedModel | ComposedModel,
    tokenizer: PreTrainedTokenizerBase,
    family: str,
    request: GenerationRequest,
    stream: bool = True,
    out: TextIO | None = None,
) -> list[str]:
    """Completions of `request.prompts` (without the prompts), streamed to `out` (default: stdout) as they come.

    One prompt streams token by token; a batch prints each row when it ends. Beam search streams nothing (the best
    beam is only known at the end) and prints the completions when they are done.
    """
    if not request.prompts:
        raise ValueError("give at least one --prompt")
    out = (out or sys.stdout) if stream else None
    adapter_names = resolve_adapter_names(model, len(request.prompts), request.adapter_names)
    batch = encode_prompts(tokenizer, request.prompts, family, request.prompt_format)
    device = next(model.parameters()).device
    batch = {key: value.to(device) for key, value in batch.items()}
    kwargs = {**request.sampling, "max_new_tokens": request.max_new_tokens, "pad_token_id": tokenizer.pad_token_id}
    if request.static_cache or request.compile:
        kwargs["cache_implementation"] = "static"
    if request.compile:
        # transformers compiles decoding on accelerators only unless told otherwise; the CPU gains too (1.4-1.5x at
        # batch 1, benchmarks/README.md)
        kwargs["compile_config"] = compile_on_every_device(CompileConfig(fullgraph=True))
    else:
        kwargs["disable_compile"] = True  # transformers compiles a static-cache decode on its own otherwise
    if adapter_names is not None:
        kwargs["adapter_names"] = adapter_names
    labels = [f"[{name}] " if adapter_names else "" for name in (adapter_names or request.prompts)]
    beams = kwargs.get("num_beams", 1) > 1
    if out is not None and not beams:
        if len(request.prompts) == 1:
            print(labels[0] + request.prompts[0], end="", file=out, flush=True)
            kwargs["streamer"] = PromptStreamer(tokenizer, out)
        else:
            kwargs["streamer"] = RowStreamer(tokenizer, labels, tokenizer.eos_token_id, out)
    with torch.inference_mode():
        generated = model.generate(**batch, **kwargs)
    if family == "decoder":
        generated = generated[:, batch["input_ids"].shape[1] :]
    texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
    if out is not None and beams:
        for label, text in zip(labels, texts):
            print(f"{label}{text}", file=out, flush=True)
    return texts


def parse_adapters(values: Sequence[str]) -> dict[str, str]:
    """`--adapter NAME=PATH` values as a name -> folder mapping (names must be unique)."""
    adapters: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"--adapter {value!r}: write NAME=PATH (a name for the adapter, then its folder)")
        if name in adapters:
            raise ValueError(f"--adapter name {name!r} is given twice")
        if not Path(path).is_dir():
            raise FileNotFoundError(f"--adapter {name}={path}: no such folder")
        adapters[name] = path
    return adapters
