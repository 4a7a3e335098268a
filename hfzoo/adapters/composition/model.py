"""Composition of task adapters: `compose(base_model, {"name": peft_folder, ...}, strategy, **options)`.

Every module that any adapter targets is replaced by one `ComposedLayer` holding all adapters' weights for that
module stacked (see `stacked.py`), so each strategy (`strategies.py`) is batched tensor ops, with no Python loop
over adapters on the forward path and never a second pass through the model (`routing.py`). A composition is a
small spec (`composition.json`) plus the weights it trained (`composition.safetensors`: routers, fusion,
`trainable_modules`) plus a copy of every adapter folder, written by `ComposedModel.save_pretrained` and read by
`load_composition`.

Adapters may mix methods (any of `stacking.METHOD_STACKS`: LoRA, bottleneck, IA3): each contributes its own delta
to the modules it targets (LoRA from the module input, bottleneck from the module output), also when several
methods target the same module, and the routers and fusion weigh all adapters present at a module alike. Adapters
may also target disjoint modules: an adapter is the identity where it is absent (`strategies.py` says what each
strategy then does). PEFT-merging (`merge=...`) is LoRA only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Iterator

import torch
from peft import PeftModel
from safetensors.torch import save_file
from torch import nn
from transformers import PreTrainedModel

from ...core.files import staged
from ...models.checkpoint_files import read_json_file
from .hub import prepare_upload
from .merging import merge_with_peft
from .routing import MASK_KEYS, ComposedLayer, RoutingContext, Wrapper
from .stacked import StackedAdapters
from .stacking import linear_shape, output_width
from .strategies import STRATEGIES
from .task_adapter import (
    ADAPTER_CONFIG, ADAPTER_WEIGHTS, BASE_RECORD, TaskAdapter, base_identity, check_base, check_base_files, check_fits,
    copied_records, load_safetensors, read_adapter,
)

BASE = "__base__"  # the adapter name meaning "no adapter" in `adapter_names`
COMPOSITION_CONFIG = "composition.json"
COMPOSITION_WEIGHTS = "composition.safetensors"
FORMAT = "hfzoo-composition"
# 2: learned strategies weigh the base output where an adapter is absent or only one is composed (version 1 applied
# a lone adapter as is)
FORMAT_VERSION = 2
# Config fields recorded with a composition and compared on load (those a model's config has).
_FINGERPRINT_FIELDS = (
    "model_type", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "vocab_size",
)
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]*")
_SPEC_KEYS = {"strategy": str, "options": dict, "adapters": list, "base_model": dict}  # composition.json's


def compose(
    base_model: PreTrainedModel, adapters: Mapping[str, str | os.PathLike], strategy: str, **options: Any
) -> ComposedModel:
    """Compose the PEFT adapters `adapters` (name -> folder with `adapter_config.json` + `adapter_model.safetensors`,
    LoRA, bottleneck or IA3) on `base_model`, which is modified in place (like `get_peft_model`; `unload()` restores
    it).

    Strategies (`STRATEGIES`) and their options:
        "fixed": each example names its adapter: `forward(..., adapter_names=[...])` / `generate(...)`, one name
            per example ("__base__": none; one name for the whole batch also works). Mixed batches gather the
            stacked weights per row, costing about one adapter.
        "average": `y + sum_n w_n delta_n` at every adapted module: the weighted mean of the adapters' outputs when
            `weights` (default uniform) sum to 1; exact for LoRA as one concatenated low-rank product.
            `merge="linear"|"ties"|"dare_linear"|"dare_ties"|"cat"` instead merges the LoRA adapters into one with
            PEFT's `add_weighted_adapter` (`density` for ties/dare, `seed` makes DARE's random pruning repeatable).
            Only `cat` is the weighted delta; PEFT's `linear` weighs the A and B factors separately, so its delta
            is not `sum_n w_n delta_n` (and ties/dare prune).
        "soft": a router per adapted module (a Linear from the module input to one logit per adapter there,
            zero-initialised = uniform mixture) and a softmax mixture of all adapters, computed as one batched
            low-rank product; `granularity="token"` (default) or `"sequence"` (mean over non-padded tokens; in
            `generate` a sequence is routed by its prompt).
        "hard": the same router, top-`top_k` (default 1) adapters; training uses straight-through Gumbel-softmax
            (`temperature`), inference computes only the chosen adapters (gathered per sequence or token).
        "fusion": AdapterFusion per adapted module (see `AdapterFusion`), `temperature` of its softmax.
        At a module that some adapter does not target, soft, hard and fusion choose among the adapters there
        and the base module's own output (what the absent adapters compute there), so with adapters on disjoint
        modules each adapted module gets a router or fusion that learns how much of its adapter to apply (so does
        a composition of one adapter); "average" adds the weighted deltas of the adapters present.
        `trainable_modules=[...]` (all strategies): modules to train with the composition and save with it, e.g. a
            fresh classification head (`"score"`, `"classifier"`); they must not contain adapted modules. An
            adapter's own saved copy of such a module (`modules_to_save`) is then not used, nor its copy of a
            module the model does not have (the head of another kind of task, e.g. SQuAD's `qa_outputs`).

    The base model and the adapters are frozen; routers, fusion and `trainable_modules` are trainable. Adapters'
    own copies of heads (`modules_to_save`, nn.Linear) are used per row by "fixed" and averaged by "average"; the
    learned strategies compose for a new task and require such a head in `trainable_modules`. Adapter dropout is not
    applied (the adapters are frozen). Modules whose input rows are not examples (experts inside a mixture of
    experts; "fixed" raises for them) support "average" and token-level routing only.
    """
    if not adapters:
        raise ValueError("compose() needs at least one adapter")
    for name in adapters:
        if name == BASE or not _NAME.fullmatch(name):
            raise ValueError(f"adapter name {name!r}: use letters, digits, '_', '.', '-' (and not {BASE!r})")
    if strategy not in STRATEGIES:
        raise ValueError(f"unknown composition strategy {strategy!r}; choose one of {sorted(STRATEGIES)}")
    options = STRATEGIES[strategy].resolve(len(adapters), options)
    loaded = [read_adapter(name, folder) for name, folder in adapters.items()]
    return _compose(base_model, strategy, options, loaded)


def _compose(
    base_model: PreTrainedModel, strategy: str, options: dict, adapters: list[TaskAdapter]
) -> ComposedModel:
    if isinstance(base_model, PeftModel):
        raise ValueError("compose() takes the plain transformers model, not a PeftModel (call `unload()` first)")
    if any(isinstance(module, ComposedLayer) for module in base_model.modules()):
        raise ValueError("this base model is already composed; call `unload()` on its ComposedModel first")
    trainable = _trainable_paths(base_model, options["trainable_modules"])
    for adapter in adapters:
        # With a head of its own (trainable), the composition also leaves out heads of other tasks that the model
        # does not have (a SQuAD adapter's qa_outputs when composing for classification); without one, such a head
        # is an error below, naming it.
        foreign = {path for path in adapter.heads if trainable and not _has_module(base_model, path)}
        adapter.heads = {path: params for path, params in adapter.heads.items()
                         if path not in trainable and path not in foreign}  # fmt: skip
        if STRATEGIES[strategy].learned and adapter.heads:
            raise ValueError(
                f"adapter {adapter.name!r} saves its own {sorted(adapter.heads)} (modules_to_save); a {strategy!r} "
                "composition trains for a new task: name that module in trainable_modules to train one for it"
            )
        check_base(adapter, base_model)
        check_fits(adapter, base_model)
    requires_grad = {name: p.requires_grad for name, p in base_model.named_parameters()}
    stacked, weights = adapters, options.get("weights")
    if options.get("merge"):
        merged = merge_with_peft(base_model, adapters, options)
        # the originals keep their heads (averaged as outputs), their LoRA deltas come from the merged adapter
        stacked = [dataclasses.replace(a, modules={}) for a in adapters] + [merged]
        weights = weights + [1.0]
    paths = sorted({path for adapter in stacked for path in (*adapter.modules, *adapter.heads)})
    for path in trainable:
        inside = [p for p in paths if p == path or p.startswith(path + ".")]
        if inside:
            raise ValueError(
                f"trainable_modules: {path} contains adapted modules {inside}; name modules the adapters do not touch"
            )
    fingerprint = _fingerprint(base_model, paths)
    config = base_model.config
    encoder = base_model.get_encoder() if getattr(config, "is_encoder_decoder", False) else None
    encoder_modules = set(encoder.modules()) if encoder is not None else set()
    context, layers = RoutingContext(), {}
    for path in paths:
        module = base_model.get_submodule(path)
        entries = [(i, a) for i, a in enumerate(stacked) if path in a.modules or path in a.heads]
        stack = StackedAdapters(path, module, output_width(module, base_model), entries, len(stacked))
        shape = linear_shape(module)
        in_features = shape[1] if shape else base_model.config.hidden_size
        combiner = STRATEGIES[strategy].build(options, stack, in_features, weights)
        combiner.to(next(module.parameters()).device, next(module.parameters()).dtype)
        on_decoder_side = encoder is not None and module not in encoder_modules
        mask_key = "decoder_attention_mask" if on_decoder_side else "attention_mask"
        layers[path] = ComposedLayer(module, stack, combiner, context, mask_key).train(base_model.training)
        parent, _, child = path.rpartition(".")
        setattr(base_model.get_submodule(parent), child, layers[path])
    base_model.requires_grad_(False)
    for path in trainable:
        base_model.get_submodule(path).requires_grad_(True)
    for layer in layers.values():
        layer.combiner.requires_grad_(True)
    composed = ComposedModel(
        base_model, strategy, options, adapters, layers, trainable, context, fingerprint, requires_grad
    )
    composed.training = base_model.training  # new modules follow the base model's train/eval mode
    return composed


def _has_module(model: nn.Module, path: str) -> bool:
    try:
        model.get_submodule(path)
    except AttributeError:
        return False
    return True


def _trainable_paths(model: nn.Module, names: list[str]) -> list[str]:
    paths = []
    for name in names:
        found = [path for path, _ in model.named_modules() if path and (path == name or path.endswith("." + name))]
        if not found:
            raise ValueError(f"trainable_modules: {type(model).__name__} has no module named {name!r}")
        paths += [path for path in found if path not in paths]
    return paths


# ----------------------------------------------------------------------------------------------- fingerprint
def _module_shape(module: nn.Module, model: nn.Module) -> list[int]:
    shape = linear_shape(module)
    return list(shape) if shape else [output_width(module, model)]


def _fingerprint(model: PreTrainedModel, paths: list[str]) -> dict:
    """What the composition depends on: the model type, its sizes, the adapted modules' shapes [out, in]."""
    config = {
        key: getattr(model.config, key) for key in _FINGERPRINT_FIELDS if getattr(model.config, key, None) is not None
    }
    modules = {path: _module_shape(model.get_submodule(path), model) for path in paths}
    return {"class": type(model).__name__, "config": config, "modules": modules}


def _check_fingerprint(saved: dict, model: PreTrainedModel) -> None:
    differs = "the base model differs from the one the composition was saved with"
    for key, expected in saved["config"].items():
        found = getattr(model.config, key, None)
        if found != expected:
            raise ValueError(f"{differs}: config.{key} is {found!r}, expected {expected!r}")
    for path, expected in saved["modules"].items():
        try:
            module = model.get_submodule(path)
        except AttributeError:
            raise ValueError(f"{differs}: it has no module {path} ({type(model).__name__})") from None
        found = _module_shape(module, model)
        if found != expected:
            raise ValueError(f"{differs}: {path} has shape {found}, expected {expected}")


# ----------------------------------------------------------------------------------------------- the model
def _saved_files(path: Path) -> list[str]:
    """The files an earlier `ComposedModel.save_pretrained` wrote into `path`, from its `composition.json` (none when
    `path` holds no composition): what a new save there may replace or remove."""
    try:
        adapters = json.loads((path / COMPOSITION_CONFIG).read_text(encoding="utf-8")).get("adapters", [])
        names = [adapter["name"] for adapter in adapters if isinstance(adapter.get("name"), str)]
    except (OSError, ValueError, AttributeError, TypeError, KeyError):
        return []
    per_adapter = (ADAPTER_CONFIG, ADAPTER_WEIGHTS, BASE_RECORD)
    adapter_files = [f"adapters/{name}/{file}" for name in names for file in per_adapter]
    return [COMPOSITION_CONFIG, COMPOSITION_WEIGHTS, *adapter_files]


class ComposedModel(Wrapper):
    """A base model with composed adapters; behaves like the transformers model it wraps.

    `forward(**kwargs)` returns the base model's outputs, `generate(...)` its generations, and any other attribute
    (`config`, `device`, `generation_config`, ...) falls back to the base model. Compositions whose strategy picks
    adapters by name ("fixed") take `adapter_names=[...]` in both.

    Thread safety: `forward` and `generate` may run concurrently from several threads (inference: no gradient,
    no training step in between), each with its own `adapter_names`; the routing inputs of a call live in a
    thread-local `RoutingContext`. Training, `unload` and `load_state` change the shared weights and are not.
    """

    wrapped = "base_model"

    def __init__(
        self, base_model: PreTrainedModel, strategy: str, options: dict, adapters: list[TaskAdapter],
        layers: dict[str, ComposedLayer], trainable_modules: list[str], context: RoutingContext, fingerprint: dict,
        requires_grad: dict[str, bool],
    ) -> None:
        super().__init__()
        self.base_model = base_model
        self.strategy, self.options, self.adapters = strategy, options, adapters
        self.composed_layers, self.trainable_modules = layers, trainable_modules
        self.routing_context, self.fingerprint, self._requires_grad = context, fingerprint, requires_grad

    @property
    def adapter_names(self) -> list[str]:
        return [adapter.name for adapter in self.adapters]

    def forward(self, *args: Any, adapter_names: list[str] | None = None, **kwargs: Any) -> Any:
        with self._routing(adapter_names, kwargs, generating=False):
            return self.base_model(*args, **kwargs)

    def generate(self, *args: Any, adapter_names: list[str] | None = None, **kwargs: Any) -> Any:
        """The base model's `generate`; beam search and `num_return_sequences` repeat each example's adapter."""
        with self._routing(adapter_names, kwargs, generating=True):
            return self.base_model.generate(*args, **kwargs)

    @contextmanager
    def _routing(self, adapter_names: list[str] | None, kwargs: dict, generating: bool) -> Iterator[None]:
        context = self.routing_context
        by_name = STRATEGIES[self.strategy].by_adapter_name
        if by_name:
            if adapter_names is None:
                raise ValueError(
                    "a 'fixed' composition needs adapter_names=[...]: one adapter name (or '__base__') per example"
                )
            context.adapter_index = self._adapter_index(adapter_names)
        elif adapter_names is not None:
            raise ValueError(
                f"adapter_names picks adapters per example in a 'fixed' composition; this one is {self.strategy!r}"
            )
        per_call = by_name or self.options.get("granularity") == "sequence"
        # the walk over every module is only paid where it matters: it is a visible share of a short inference forward
        if per_call and self.training and self._checkpointing():
            raise ValueError(
                f"a {self.strategy!r} composition routes by per-call inputs, which gradient checkpointing's recomputed "
                "forward would not see; disable gradient checkpointing (or use token granularity)"
            )
        context.masks = {key: kwargs[key] for key in MASK_KEYS if isinstance(kwargs.get(key), torch.Tensor)}
        context.sequence_cache = {} if generating else None
        try:
            yield
        finally:
            context.reset()

    def _checkpointing(self) -> bool:
        return any(getattr(module, "gradient_checkpointing", False) for module in self.base_model.modules())

    def _adapter_index(self, adapter_names: list[str]) -> torch.Tensor:
        index = {name: i for i, name in enumerate(self.adapter_names)}
        index[BASE] = len(self.adapters)
        unknown = sorted({name for name in adapter_names if name not in index})
        if unknown:
            raise ValueError(
                f"unknown adapter(s) {unknown} in adapter_names; composed: {self.adapter_names} (and {BASE!r})"
            )
        return torch.tensor([index[name] for name in adapter_names], device=self.base_model.device)

    def check_base_weights(self, allow_other_base: bool = False, base: dict | None = None) -> None:
        """Refuse the base model when its `config.json` or weights are not those each adapter recorded it was
        trained on (`check_base_files`: a base of the same kind and sizes, another seed's), or with
        `allow_other_base` say so in one line. Not part of `compose()`, whose callers may compose on a model built in
        memory on purpose: the commands (`hfzoo generate`, `compose`) call it on what the user gave them. `base`: the
        base's `base_identity` as read before a saved composition loaded its heads onto it, else read now."""
        base = base or base_identity(self.base_model)
        for adapter in self.adapters:
            check_base_files(adapter.name, adapter.folder, adapter.base, base, allow_other_base)

    def get_nb_trainable_parameters(self) -> tuple[int, int]:
        """(trainable, all) parameter counts; the stacked adapters count as frozen parameters."""
        parameters = list(self.parameters())
        return sum(p.numel() for p in parameters if p.requires_grad), sum(p.numel() for p in parameters)

    def print_trainable_parameters(self) -> None:
        trainable, total = self.get_nb_trainable_parameters()
        share = 100 * trainable / total
        print(f"trainable params: {trainable:,d} || all params: {total:,d} || trainable%: {share:.4f}")

    def unload(self) -> PreTrainedModel:
        """Put the base model's own modules back (and their requires_grad flags) and return it."""
        for path, layer in self.composed_layers.items():
            parent, _, child = path.rpartition(".")
            setattr(self.base_model.get_submodule(parent), child, layer.base_layer)
        for name, parameter in self.base_model.named_parameters():
            parameter.requires_grad_(self._requires_grad.get(name, parameter.requires_grad))
        self.composed_layers = {}
        return self.base_model

    # ------------------------------------------------------------------------------------------- save / load
    def composition_state(self) -> dict[str, torch.Tensor]:
        """The composition's own weights: routers/fusion per adapted module and the trainable modules."""
        state = {}
        for path, layer in self.composed_layers.items():
            state.update({f"{path}.combiner.{key}": value for key, value in layer.combiner.state_dict().items()})
        for path in self.trainable_modules:
            module_state = self.base_model.get_submodule(path).state_dict()
            state.update({f"{path}.{key}": value for key, value in module_state.items()})
        return state

    def spec(self) -> dict:
        """The content of `composition.json`."""
        adapters = [
            {
                "name": a.name, "kind": a.kind, "rank": a.rank, "targets": sorted(a.modules), "heads": sorted(a.heads),
                "adapter_config": a.config,
            }
            for a in self.adapters
        ]
        return {
            "format": FORMAT, "version": FORMAT_VERSION, "strategy": self.strategy, "options": self.options, "adapters": adapters,
            "base_model": self.fingerprint,
        }

    def save_pretrained(
        self,
        path: str | os.PathLike,
        *,
        state_dict: dict[str, torch.Tensor] | None = None,
        push_to_hub: bool = False,
        **hub_options: Any,
    ) -> None:
        """Write `composition.json`, `composition.safetensors` and `adapters/<name>/` (a copy of each adapter
        folder, naming its base from there: `copied_records`) to `path`, atomically
        (`hfzoo.core.files.publish_folder`): built in a staging folder, then published with `composition.json` last.
        Other files in `path` stay; of an earlier composition saved there, only the files
        this one no longer has (an adapter it lacks) are removed. `state_dict`: the whole model's state dict to take the
        composition's weights from (a sharded model's, gathered whole); none = the model's own. `push_to_hub`: then
        upload it as transformers' `save_pretrained` does (`hub_options`: `repo_id`, `token`, `private`,
        `commit_message`, `api`; see `hfzoo.adapters.composition.hub`)."""
        hub = prepare_upload(path, push_to_hub, **hub_options)
        copies = {adapter.name: copied_records(adapter, Path(path) / "adapters" / adapter.name)
                  for adapter in self.adapters}  # fmt: skip
        with staged(path, marker=COMPOSITION_CONFIG, previous=_saved_files(Path(path))) as staging:
            spec = self.spec()
            for entry in spec["adapters"]:  # as its copy in adapters/<name>/ holds it
                entry["adapter_config"] = copies[entry["name"]][ADAPTER_CONFIG]
            (staging / COMPOSITION_CONFIG).write_text(json.dumps(spec, indent=2, sort_keys=True), encoding="utf-8")
            state = self.composition_state()
            if state_dict is not None:
                state = {key: state_dict[f"base_model.{key}"] for key in state}
            tensors = {key: value.detach().cpu().contiguous().clone() for key, value in state.items()}
            save_file(tensors, staging / COMPOSITION_WEIGHTS, metadata={"format": "pt"})
            for adapter in self.adapters:
                target = staging / "adapters" / adapter.name
                target.mkdir(parents=True)
                shutil.copy2(adapter.folder / ADAPTER_WEIGHTS, target / ADAPTER_WEIGHTS)
                for file, record in copies[adapter.name].items():
                    (target / file).write_text(json.dumps(record, indent=2, sort_keys=True) + "\n", encoding="utf-8")
        if hub is not None:
            hub.upload(Path(path))

    def _load_state(self, tensors: dict[str, torch.Tensor]) -> None:
        expected = self.composition_state()
        missing, unexpected = sorted(set(expected) - set(tensors)), sorted(set(tensors) - set(expected))
        if missing or unexpected:
            raise ValueError(
                f"{COMPOSITION_WEIGHTS} does not match the composition: missing {missing}, unexpected {unexpected}"
            )
        for key, tensor in tensors.items():
            if tensor.shape != expected[key].shape:
                raise ValueError(
                    f"{COMPOSITION_WEIGHTS}: {key} has shape {list(tensor.shape)}, the model expects "
                    f"{list(expected[key].shape)}"
                )
        with torch.no_grad():
            for key, tensor in tensors.items():
                expected[key].copy_(tensor)


def _check_version(spec: dict, file: Path) -> None:
    """A version 1 learned composition of one adapter, or of adapters that target different modules, has no weights
    for the base output as a candidate (nor, where a module had one adapter, any combiner): it computes otherwise."""
    version = spec.get("version")
    if not isinstance(version, int) or version > FORMAT_VERSION:
        raise ValueError(f"{file}: version {version!r} is not one this hfzoo reads (1 to {FORMAT_VERSION})")
    targets = {tuple(adapter.get("targets", ())) for adapter in spec["adapters"]}
    learned = spec["strategy"] in STRATEGIES and STRATEGIES[spec["strategy"]].learned
    if version < 2 and learned and (len(targets) > 1 or len(spec["adapters"]) == 1):
        raise ValueError(
            f"{file}: a version 1 {spec['strategy']!r} composition of one adapter or of adapters on different "
            "modules, saved by an older hfzoo that applied an adapter alone on a module as is; this one also weighs "
            "the base output there, so the saved router/fusion weights do not fit: train the composition again"
        )


def load_composition(base_model: PreTrainedModel, path: str | os.PathLike) -> ComposedModel:
    """Rebuild a saved composition on `base_model` (modified in place); raises an error naming the difference when
    the base model is not the kind it was saved with (model type, sizes, adapted modules' shapes)."""
    path = Path(path)
    if not (path / COMPOSITION_CONFIG).is_file():
        raise FileNotFoundError(f"{path} has no {COMPOSITION_CONFIG}: not a saved composition (or an incomplete copy)")
    spec = read_json_file(path / COMPOSITION_CONFIG)
    if spec.get("format") != FORMAT:
        raise ValueError(f"{path / COMPOSITION_CONFIG} is not a saved composition (format {spec.get('format')!r})")
    for key, kind in _SPEC_KEYS.items():
        if not isinstance(spec.get(key), kind):
            raise ValueError(
                f"{path / COMPOSITION_CONFIG}: key {key!r} is missing or not a {kind.__name__}; the file was edited "
                "or is damaged: save the composition again"
            )
    if not all(isinstance(entry, dict) and isinstance(entry.get("name"), str) for entry in spec["adapters"]):
        raise ValueError(f"{path / COMPOSITION_CONFIG}: every entry of 'adapters' needs a 'name'; save it again")
    _check_version(spec, path / COMPOSITION_CONFIG)
    _check_fingerprint(spec["base_model"], base_model)
    adapters = {adapter["name"]: path / "adapters" / adapter["name"] for adapter in spec["adapters"]}
    composed = compose(base_model, adapters, spec["strategy"], **spec["options"])
    try:
        composed._load_state(load_safetensors(path / COMPOSITION_WEIGHTS))
    except Exception:
        composed.unload()
        raise
    return composed
