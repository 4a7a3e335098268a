"""The bottleneck-adapter tuner: finds each block's sub-layer outputs and wraps them in `BottleneckLayer`s."""

from __future__ import annotations

from contextlib import contextmanager
from functools import partial
from typing import Any, Iterator

from peft.tuners.tuners_utils import BaseTuner
from peft.utils import AuxiliaryTrainingWrapper
from torch import nn
from transformers.pytorch_utils import Conv1D

from ...integrations.versions import written_for
from .config import BottleneckConfig
from .layer import MERGE_ERROR, BottleneckLayer

_ZOO = {"attention": [r"self_attn\.o_proj"], "ffn": [r"mlp\.down_proj"], "moe_ffn": [r"mlp"]}
_LLAMA_LIKE = {"attention": [r"self_attn\.o_proj"], "ffn": [r"mlp\.down_proj"]}
_BERT_LIKE = {"attention": [r"attention\.output\.dense"], "ffn": [r"layer\.\d+\.output\.dense"]}

# model_type -> regexes (matched against the end of a module name, at a "." boundary) of the modules whose output is
# a sub-layer's output: "attention" = self-attention output projection, "ffn" = feed-forward output projection.
# "moe_ffn" replaces "ffn" when the config has experts: hfzoo's mixture-of-experts block has no single down
# projection (each expert has one), and an adapter per expert would not be an adapter after the feed-forward block,
# so the whole block is wrapped. Cross-attention outputs (T5 `EncDecAttention.o`, hfzoo `cross_attn.o_proj`, GPT-2
# `crossattention.c_proj`) are deliberately not matched: neither paper adapts them.
SUBLAYER_OUTPUTS: dict[str, dict[str, list[str]]] = {
    "hfzoo_decoder": _ZOO,
    "hfzoo_encoder": _ZOO,
    "hfzoo_encoder_decoder": _ZOO,
    "llama": _LLAMA_LIKE,
    "mistral": _LLAMA_LIKE,
    "qwen2": _LLAMA_LIKE,
    # BERT: `attention.output.dense` also ends in "output.dense"; the feed-forward one is anchored on the layer index.
    "bert": _BERT_LIKE,
    "roberta": _BERT_LIKE,
    "gpt2": {"attention": [r"attn\.c_proj"], "ffn": [r"mlp\.c_proj"]},
    "t5": {"attention": [r"SelfAttention\.o"], "ffn": [r"DenseReluDense\.wo"]},
}


def default_target_modules(variant: str, model_config: dict) -> str:
    """The `target_modules` regex for `variant` on a model of this config (PEFT full-matches it to module names)."""
    model_type = model_config.get("model_type")
    outputs = SUBLAYER_OUTPUTS.get(model_type)
    if outputs is None:
        raise ValueError(
            f"Bottleneck adapters know no default targets for model_type {model_type!r} (known: "
            f"{', '.join(sorted(SUBLAYER_OUTPUTS))}). Pass `target_modules`: the output projections of the attention "
            "and feed-forward blocks, e.g. ['self_attn.o_proj', 'mlp.down_proj']."
        )
    ffn = outputs["moe_ffn"] if model_config.get("num_experts") and "moe_ffn" in outputs else outputs["ffn"]
    patterns = (ffn + outputs["attention"]) if variant == "houlsby" else ffn
    return rf"(.*\.)?({'|'.join(patterns)})"


def _pass_adapter_names(module: nn.Module, args: tuple, kwargs: dict, adapter_names: list[str]) -> tuple:
    kwargs["adapter_names"] = adapter_names
    return args, kwargs


class BottleneckModel(BaseTuner):
    """Injects bottleneck adapters (see `BottleneckConfig`) into a transformers model; created by `get_peft_model`.

    Adapters cannot be merged into the base weights (they are non-linear): `merge_and_unload` raises, `unload`
    returns the base model.

    A PEFT method is made by overriding `BaseTuner`'s private hooks (as PEFT's own methods are), and `PeftModel` calls
    `_enable_peft_forward_hooks` when the tuner has one: each override carries the PEFT versions it was written for.
    """

    prefix: str = "bottleneck_"
    tuner_layer_cls = BottleneckLayer
    target_module_mapping = SUBLAYER_OUTPUTS

    @written_for("peft")
    def _prepare_adapter_config(self, peft_config: BottleneckConfig, model_config: dict) -> BottleneckConfig:
        if peft_config.target_modules is None:
            peft_config.target_modules = default_target_modules(peft_config.variant, model_config)
        return peft_config

    @written_for("peft")
    def _create_and_replace(
        self,
        peft_config: BottleneckConfig,
        adapter_name: str,
        target: nn.Module,
        target_name: str,
        parent: nn.Module,
        current_key: str,
        **kwargs: Any,
    ) -> None:
        if isinstance(target, BottleneckLayer):
            target.update_layer(adapter_name, peft_config)
            return
        new_module = BottleneckLayer(target, adapter_name, peft_config, self._output_features(target, current_key))
        if adapter_name not in self.active_adapters:
            new_module.requires_grad_(False)  # an added adapter is not trainable until `set_adapter`
        self._replace_module(parent, target_name, new_module, target)

    def _output_features(self, target: nn.Module, key: str) -> int:
        if isinstance(target, nn.Linear):
            return target.out_features
        if isinstance(target, Conv1D):  # GPT-2 stores (in, out) weights; `nf` is the output width
            return target.nf
        # A whole sub-layer (e.g. a mixture-of-experts block) outputs hidden states.
        hidden_size = getattr(getattr(self.model, "config", None), "hidden_size", None)
        if hidden_size is None:
            raise ValueError(
                f"Cannot tell the output width of {key} ({type(target).__name__}): bottleneck adapters wrap "
                "nn.Linear, transformers' Conv1D, or a module returning hidden states of a model with "
                "`config.hidden_size`."
            )
        return hidden_size

    @written_for("peft")
    def _replace_module(self, parent: nn.Module, child_name: str, new_module: nn.Module, child: nn.Module) -> None:
        if new_module is getattr(child, "base_layer", None):
            # Unloading puts the wrapped module back as it was; PEFT's version would also re-assign `weight`, which a
            # wrapped mixture-of-experts block does not have.
            setattr(parent, child_name, new_module)
            return
        super()._replace_module(parent, child_name, new_module, child)

    def delete_adapter(self, adapter_name: str) -> None:
        super().delete_adapter(adapter_name)
        # PEFT takes the new active adapter from the first wrapped module, which may hold no adapter any more when
        # adapters wrap different modules (a houlsby and a pfeiffer adapter side by side): none would be active.
        if not self.active_adapters and self.peft_config:
            self.set_adapter(next(iter(self.peft_config)))

    @written_for("peft")
    def _check_merge_allowed(self) -> None:
        raise ValueError(MERGE_ERROR)

    @written_for("peft")
    @contextmanager
    def _enable_peft_forward_hooks(self, *args: Any, **kwargs: Any) -> Iterator[None]:
        """Route `adapter_names=[...]` (one adapter name or "__base__" per example) of `forward`/`generate` to
        every adapter layer and `modules_to_save` wrapper for the duration of the call."""
        adapter_names = kwargs.pop("adapter_names", None)
        if adapter_names is None:
            yield
            return
        unknown = set(adapter_names) - set(self.peft_config) - {"__base__"}
        if unknown:
            raise ValueError(
                f"Unknown adapter(s) in `adapter_names`: {sorted(unknown)}; loaded: {sorted(self.peft_config)} "
                "('__base__' means no adapter)."
            )
        if self.training and any(getattr(module, "gradient_checkpointing", False) for module in self.model.modules()):
            raise ValueError(
                "`adapter_names` cannot be combined with gradient checkpointing in training: the recomputed forward "
                "of the backward pass would not see them. Disable gradient checkpointing for mixed-adapter batches."
            )
        per_row = list(adapter_names)
        num_beams = kwargs.get("num_beams")
        if isinstance(num_beams, int) and num_beams > 1:
            # beam search repeats each example num_beams times in the decoder, but the encoder sees the originals
            per_row = [name for name in adapter_names for _ in range(num_beams)]
        encoder = self.model.get_encoder() if hasattr(self.model, "get_encoder") else None
        encoder_modules = set(encoder.modules()) if encoder is not None and encoder is not self.model else set()
        handles = []
        for module in self.model.modules():
            if isinstance(module, (BottleneckLayer, AuxiliaryTrainingWrapper)):
                names = list(adapter_names) if module in encoder_modules else per_row
                hook = partial(_pass_adapter_names, adapter_names=names)
                handles.append(module.register_forward_pre_hook(hook, with_kwargs=True))
        try:
            yield
        finally:
            for handle in handles:
                handle.remove()
