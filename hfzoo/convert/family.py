"""How a native family is described to the converter: its heads, its config in both directions, its weight rules.

Each family module (`gpt2`, `llama`, `bert`, `roberta`, `t5`, `bart`) builds one `NativeFamily`; `api` finds the
family by the native `model_type` on import and by the hfzoo config's switches on export.
"""

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from transformers import PreTrainedConfig, PreTrainedModel

from ..models.component_options import DECODER_SWITCHES_OFF
from .mapping import Rule, shares_weight


@dataclass(frozen=True)
class Head:
    """One task head both sides have: hfzoo's class <-> the native class, and where each keeps its bare model.

    `zoo_prefix` / `native_prefix` are the bare model's key prefixes inside the head (`model.`, `transformer.`,
    `bert.`, ... or empty for the bare model itself); `rules` gives the head's own weights, with full keys.
    `encoder_only` marks an encoder-decoder head that holds the encoder stack alone (T5's tagger and
    `T5EncoderModel`): the bare model's decoder rules are left out.
    """

    zoo_class: type[PreTrainedModel]
    native_class: str
    zoo_prefix: str
    native_prefix: str
    rules: Callable[[PreTrainedConfig, PreTrainedConfig], list[Rule]] = lambda zoo_config, native_config: []
    encoder_only: bool = False


@dataclass(frozen=True)
class ConfigMap:
    """A native family's config correspondence, stated once for both directions.

    - `fields` maps hfzoo fields to native ones whose values are copied as they are, each way.
    - `fixed` holds the hfzoo switches the native architecture always has: set on import, required on export (an
      hfzoo config with another value is refused, naming the switch).
    The token ids and label names travel with `fields`; what needs computing (an activation's name, a width the
    native config leaves implicit) each family adds itself.
    """

    native_class: type[PreTrainedConfig]
    fields: dict[str, str]
    fixed: dict[str, object]

    def zoo_kwargs(self, native_config: PreTrainedConfig) -> dict:
        copied = {zoo: getattr(native_config, native, None) for zoo, native in self.fields.items()}
        return {**self.fixed, **copied, **labels(native_config)}

    def native_config(self, zoo_config: PreTrainedConfig, what: str, **computed) -> PreTrainedConfig:
        # transformers' GPT-2, Llama, Mistral, Qwen2 and Gemma have no QK-norm and no logit cap (each family's
        # activation list refuses ReLU²)
        require(zoo_config, what, **DECODER_SWITCHES_OFF, **self.fixed)
        copied = {native: getattr(zoo_config, zoo) for zoo, native in self.fields.items()}
        return self.native_class(**{**copied, **labels(zoo_config), **computed})


def same_names(*names: str) -> dict[str, str]:
    """`ConfigMap.fields` entries for fields both configs name alike."""
    return {name: name for name in names}


@dataclass(frozen=True)
class NativeFamily:
    """A native architecture hfzoo converts to and from.

    - `position_embedding` is the hfzoo position kind the family has; an export that names no family picks the
      first with the config's kind that `prefers(zoo_config)` (BERT needs token types, RoBERTa does without).
    - `zoo_config(native_model)` infers the hfzoo config's keyword arguments from the native model (its config, and
      its weights where the config is not enough, such as whether the head is tied); it refuses a native option
      hfzoo cannot compute, naming it.
    - `native_config(zoo_config)` builds the native config, refusing (naming the switch) an hfzoo component the
      native class cannot express.
    - `base_rules(zoo_config, native_config)` pairs the bare model's weights (keys without the head prefixes).
    - `prepare_native(model, zoo_config)` adjusts a freshly built native model before the weights are copied in
      (T5 ties its head to the embedding in `__init__`, whatever the config says); `head_kwargs(head, zoo_config)`
      are extra arguments for building the native head (BERT's `add_pooling_layer`).
    """

    model_type: str
    position_embedding: str
    zoo_config: Callable[[PreTrainedModel], dict]
    native_config: Callable[[PreTrainedConfig], PreTrainedConfig]
    base_rules: Callable[[PreTrainedConfig, PreTrainedConfig], list[Rule]]
    heads: Sequence[Head]
    prefers: Callable[[PreTrainedConfig], bool] = lambda zoo_config: True
    prepare_native: Callable[[PreTrainedModel, PreTrainedConfig], None] = lambda model, zoo_config: None
    head_kwargs: Callable[[Head, PreTrainedConfig], dict] = lambda head, zoo_config: {}

    @property
    def zoo_config_class(self) -> type[PreTrainedConfig]:
        return self.heads[0].zoo_class.config_class

    def head_for_native(self, class_name: str) -> Head:
        for head in self.heads:
            if head.native_class == class_name:
                return head
        raise ValueError(
            f"{class_name} has no hfzoo counterpart; the {self.model_type} heads hfzoo converts are "
            f"{', '.join(head.native_class for head in self.heads)}. Load the checkpoint with one of those classes."
        )

    def head_for_zoo(self, zoo_class: type) -> Head:
        for head in self.heads:
            if head.zoo_class is zoo_class:
                return head
        raise ValueError(
            f"{zoo_class.__name__} has no {self.model_type} counterpart; the hfzoo heads that export to "
            f"{self.model_type} are {', '.join(head.zoo_class.__name__ for head in self.heads)}."
        )

    def rules(self, head: Head, zoo_config: PreTrainedConfig, native_config: PreTrainedConfig) -> list[Rule]:
        """Every weight rule of `head`, with full keys. A head rule replaces a bare-model rule for the same hfzoo
        weight (RoBERTa's classifier holds what hfzoo keeps in the pooler)."""
        head_rules = head.rules(zoo_config, native_config)
        claimed = {key for rule in head_rules for key in rule.zoo}
        base = self.base_rules(zoo_config, native_config)
        if head.encoder_only:
            base = [rule for rule in base if not all(key.startswith("decoder.") for key in rule.zoo)]
        base = [rule.prefixed(head.zoo_prefix, head.native_prefix) for rule in base]
        return [rule for rule in base if not claimed.intersection(rule.zoo)] + head_rules


def require(config: PreTrainedConfig, what: str, **allowed) -> None:
    """Raise `ValueError` naming the first field of `config` whose value is not among the allowed ones.

    `allowed` maps a field to one value or a tuple of values; `what` names what cannot express the others, e.g.
    "GPT2LMHeadModel" for an export, "hfzoo's decoder" for an import.
    """
    for name, values in allowed.items():
        values = values if isinstance(values, tuple) else (values,)
        value = getattr(config, name, None)
        if value not in values:
            wanted = " or ".join(repr(v) for v in values)
            raise ValueError(
                f"{what} cannot express {type(config).__name__}.{name}={value!r}: it needs {name}={wanted}."
            )


def tied_head(model: PreTrainedModel) -> bool:
    """Whether the native model's output projection is its input embedding (tied, or equal values); a model
    without one follows its config. Read from the weights: transformers 5 forces T5's config to say tied."""
    head = model.get_output_embeddings()
    if head is None:
        return bool(getattr(model.config, "tie_word_embeddings", True))
    return shares_weight(head.weight, model.get_input_embeddings().weight)


def labels(config: PreTrainedConfig) -> dict:
    """A classifier's label names, which a converted config keeps (they also size its head)."""
    if not getattr(config, "id2label", None):
        return {}
    return {"id2label": dict(config.id2label), "label2id": dict(config.label2id)}
