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
    CONFIG_MAPPING,
    AutoConfig,
    AutoModelForCausalLM,
    AutoModelForSeq2SeqLM,
    AutoTokenizer,
    PretrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.generation.configuration_utils import CompileConfig
from transformers.generation.streamers import BaseStreamer, TextStreamer

from .adapters import compose, load_composition
from .adapters.composition import BASE, ComposedModel
from .adapters.composition.task_adapter import base_identity
from .core.cpu_layout import tune_for_cpu
from .data.corpus import missing_local_path
from .integrations.transformers import compile_on_every_device
from .models.checked_loading import listed_keys, load_checked
from .models.checkpoint_files import CONFIG_NAME, CheckpointFileError, check_checkpoint_folder, read_json_file
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

    def __post_init__(self) -> None:
        """Refuse, before any model loads, a setting `generate()` would fail on with a traceback (or ignore): no
        prompt, no new token, no beam, a temperature or penalty that is not positive, a top-k or top-p out of range."""
        if not self.prompts:
            raise ValueError("give at least one --prompt")
        if self.max_new_tokens < 1:
            raise ValueError(f"--max_new_tokens is {self.max_new_tokens}: generate at least 1 token")
        checks = {
            "num_beams": (lambda v: v >= 1, "at least 1 (1: greedy or sampling, more: beam search)"),
            "temperature": (lambda v: v > 0, "a positive number (greedy: leave out --temperature and --do_sample)"),
            "top_k": (lambda v: v >= 0, "0 (off) or more"),
            "top_p": (lambda v: 0 < v <= 1, "in (0, 1]"),
            "repetition_penalty": (lambda v: v > 0, "a positive number (1: none)"),
        }
        for key, (valid, expected) in checks.items():
            if self.sampling.get(key) is not None and not valid(self.sampling[key]):
                raise ValueError(f"--{key} is {self.sampling[key]}: it must be {expected}")


def load_for_generation(
    model_path: str,
    adapters: Mapping[str, str] | None = None,
    composition: str | None = None,
    device: str = "cpu",
    allow_other_base: bool = False,
) -> tuple[PreTrainedModel | ComposedModel, PreTrainedTokenizerBase, str]:
    """The model (with its adapters composed for fixed routing, or a saved composition), its tokenizer and family.

    The weights load as `finetune` and `convert` load them (`load_checked`): from safetensors only, and refused when
    they do not match the config (an edited `num_hidden_layers` would load random layers or drop some). An adapter
    whose record says it was trained on another base of the same shape is refused unless `allow_other_base`
    (`ComposedModel.check_base_weights`)."""
    if adapters and composition:
        raise ValueError("give either --adapter NAME=PATH (fixed routing) or --composition PATH, not both")
    check_device(device)
    config = generation_config(model_path)
    family = model_family(config)
    if family == "encoder":
        raise ValueError(
            f"{model_path} is an encoder ({config.model_type}): it has no generating head; "
            "hfzoo generate takes a causal LM or a sequence-to-sequence model"
        )
    auto_class = AutoModelForSeq2SeqLM if family == "encoder_decoder" else AutoModelForCausalLM
    model, new = load_checked(auto_class, model_path, config=config, dtype=torch.float32)
    untrained = [key for key in new if key in dict(model.named_parameters())]
    if untrained:  # a native task checkpoint with an untied head (hfzoo's own models refuse it as they load)
        raise ValueError(
            f"{model_path} holds a {', '.join(config.architectures or ['model'])} checkpoint without weights for "
            f"{listed_keys(untrained)}: {auto_class.__name__} would generate with a random head. Give a language "
            "model checkpoint."
        )
    model = tune_for_cpu(model.to(device).eval())
    try:
        tokenizer = AutoTokenizer.from_pretrained(model_path)
    except (OSError, ValueError) as error:  # no tokenizer files, or ones transformers cannot build a tokenizer from
        raise ValueError(
            f"{model_path} has no tokenizer hfzoo generate can load ({_first_line(error)}): save the model's "
            "tokenizer beside it (tokenizer.save_pretrained)"
        ) from None
    if family == "decoder":
        tokenizer.padding_side = "left"  # every row's continuation starts at the same position
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if composition:
        base = base_identity(model)  # read before the composition's heads change the model
        composed = load_composition(model, composition)
        composed.check_base_weights(allow_other_base, base)
        return composed, tokenizer, family
    return compose_fixed(model, adapters or {}, allow_other_base), tokenizer, family


def compose_fixed(
    model: PreTrainedModel, adapters: Mapping[str, str], allow_other_base: bool = False
) -> PreTrainedModel | ComposedModel:
    """`model` with `adapters` composed for fixed routing (each row names its adapter), or `model` itself without
    adapters; an adapter that does not fit `model` (its shapes, or a recorded base of other weights unless
    `allow_other_base`) is refused with `model` left as it was, so a server can try an adapter and keep serving."""
    if not adapters:
        return model
    base = base_identity(model)
    composed = compose(model, dict(adapters), strategy="fixed")
    try:
        composed.check_base_weights(allow_other_base, base)
    except ValueError:
        composed.unload()
        raise
    return composed


def check_device(device: str) -> None:
    """Refuse a `--device` torch cannot place a tensor on (`cuda` where torch has no CUDA or no GPU, a GPU index
    past the last one, a misspelt name) before anything loads, in one line."""
    try:
        torch.empty(0, device=device)
    except (RuntimeError, AssertionError) as error:  # torch asserts on CUDA where it was built without it
        reason = _first_line(error)
        raise ValueError(f"--device {device}: torch cannot use it here ({reason}); use --device cpu") from None


def generation_config(model_path: str) -> PretrainedConfig:
    """The config of `model_path` (a local folder or a Hub name), refused in one line where transformers would fail
    with a traceback: a local path that does not exist (transformers would take it for a Hub name), a folder
    without `config.json` or with weights missing, truncated or pickled (`check_checkpoint_folder`), a Hub name
    that cannot be fetched (offline, unknown), and a model whose code only the checkpoint ships (its `auto_map`):
    hfzoo generate runs no code from a checkpoint."""
    if missing_local_path(model_path):
        raise FileNotFoundError(f"{model_path} does not exist")
    if Path(model_path).is_dir():
        config_file = Path(model_path) / CONFIG_NAME
        if not config_file.is_file():
            raise CheckpointFileError(f"{model_path} has no {CONFIG_NAME}: it is not a model checkpoint folder")
        check_checkpoint_folder(model_path)
        values = read_json_file(config_file)
        if values.get("model_type") not in CONFIG_MAPPING and values.get("auto_map"):
            raise ValueError(
                f"{model_path} is a {values.get('model_type')!r} model, which only the code it ships defines "
                f"({config_file} names it in auto_map); hfzoo generate runs no code from a checkpoint"
            )
    try:
        return AutoConfig.from_pretrained(model_path)  # trust_remote_code unset: never runs a checkpoint's code
    except ValueError as error:  # a model type transformers does not know (on the Hub: or only its own code defines)
        raise ValueError(f"{model_path}: {_first_line(error)}") from None
    except OSError as error:  # a Hub name: offline, not found, or no access
        raise FileNotFoundError(
            f"{model_path} is not a local folder, and the Hub does not give a model of that name: {_first_line(error)}"
        ) from None


def _first_line(error: BaseException) -> str:
    return next((line.strip() for line in str(error).splitlines() if line.strip()), type(error).__name__)


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
    out = (out or sys.stdout) if stream else None
    adapter_names = resolve_adapter_names(model, len(request.prompts), request.adapter_names)
    batch = encode_prompts(tokenizer, request.prompts, family, request.prompt_format)
    empty = [number for number, length in enumerate(batch["attention_mask"].sum(dim=1).tolist(), 1) if length == 0]
    if empty:  # a decoder without a bos token has nothing to continue (an empty row fails inside attention)
        raise ValueError(f"--prompt number {empty[0]} is empty (no tokens): give text to continue")
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


def parse_adapters(values: Sequence[str], flag: str = "--adapter") -> dict[str, str]:
    """`--adapter NAME=PATH` values (or `flag`'s) as a name -> folder mapping (names must be unique)."""
    adapters: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise ValueError(f"{flag} {value!r}: write NAME=PATH (a name for it, then its folder)")
        if name in adapters:
            raise ValueError(f"{flag} name {name!r} is given twice")
        if not Path(path).is_dir():
            raise FileNotFoundError(f"{flag} {name}={path}: no such folder")
        adapters[name] = path
    return adapters
