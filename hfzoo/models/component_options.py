"""The component switches every hfzoo family understands, and their validation.

Kept free of torch so that config files (which `save_pretrained` copies next to the weights) stay
light, and so that a wrong value fails when the config is created, not deep inside a forward pass.
"""

import numbers
import types
import typing

NORM_TYPES = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
# Gated variants (Shazeer, 2020) map to the activation of their gate: `geglu` gates with the exact GELU,
# `geglu_tanh` with GPT-2's tanh approximation (`gelu_new`), as T5 v1.1, Flan-T5 and mT5 do.
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu", "geglu_tanh": "gelu_new"}
ACTIVATIONS = ("gelu", "gelu_new", "relu", "relu2", "silu", *GATED_ACTIVATIONS)
# Switches only the decoder takes (the modded-nanoGPT speedrun's), with the value that leaves them off.
DECODER_SWITCHES_OFF = {"qk_norm": False, "logit_softcap": None}
POSITION_EMBEDDINGS = ("learned", "sinusoidal", "rotary", "alibi", "relative", "disentangled", "none")
# DeBERTa's position terms of disentangled attention: content-to-position, position-to-content.
POSITION_ATTENTION_TERMS = ("c2p|p2c", "c2p", "p2c")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; choose one of {', '.join(map(repr, choices))}.")


def _accepts(value, annotation) -> bool:
    """Whether `value` fits a field annotation (`int`, `float | None`, `int | list[int] | None`, ...).

    `bool` is a subclass of `int` in Python, so `True` is refused where a number is expected and `1` where a flag is;
    an integer is a valid `float` (JSON writes 10000.0 as 10000 when it was given as an integer).
    """
    if annotation is type(None):
        return value is None
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        return any(_accepts(value, member) for member in typing.get_args(annotation))
    if typing.get_origin(annotation) is list:
        (item,) = typing.get_args(annotation)
        return isinstance(value, list) and all(_accepts(element, item) for element in value)
    if annotation is int:
        return isinstance(value, numbers.Integral) and not isinstance(value, bool)
    if annotation is float:
        return isinstance(value, numbers.Real) and not isinstance(value, bool)
    return isinstance(value, annotation)


def _type_name(annotation) -> str:
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        return " or ".join(_type_name(member) for member in typing.get_args(annotation))
    if annotation is type(None):
        return "None"
    return str(annotation) if typing.get_origin(annotation) else annotation.__name__


def check_field_types(config, annotations: dict[str, object]) -> None:
    """Raise `TypeError` naming the field, its value and the expected type, for the first field whose value does not
    fit its annotation: a string such as `hidden_size="128"` (from a YAML/JSON file or a keyword) would otherwise fail
    later with an unrelated message (`not all arguments converted during string formatting`)."""
    for name, annotation in annotations.items():
        value = getattr(config, name)
        if not _accepts(value, annotation):
            raise TypeError(
                f"{name} must be {_type_name(annotation)}{' (true or false)' if annotation is bool else ''}, "
                f"got {value!r} ({type(value).__name__})."
            )


def validate_components(config) -> None:
    """Raise `ValueError` naming the setting to change when a combination of switches cannot work."""
    _check_choice("norm_type", config.norm_type, NORM_TYPES)
    _check_choice("norm_position", config.norm_position, NORM_POSITIONS)
    _check_choice("activation", config.activation, ACTIVATIONS)
    _check_choice("position_embedding", config.position_embedding, POSITION_EMBEDDINGS)
    for name in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads", "intermediate_size"):
        if int(getattr(config, name)) <= 0:
            raise ValueError(f"{name} must be a positive integer, got {getattr(config, name)}.")
    if config.hidden_size % config.num_attention_heads:
        raise ValueError(
            f"hidden_size ({config.hidden_size}) must be divisible by num_attention_heads "
            f"({config.num_attention_heads}); change one of them."
        )
    if config.num_key_value_heads <= 0 or config.num_attention_heads % config.num_key_value_heads:
        raise ValueError(
            f"num_attention_heads ({config.num_attention_heads}) must be divisible by num_key_value_heads "
            f"({config.num_key_value_heads}); use 1 for multi-query or num_attention_heads for multi-head attention."
        )
    head_dim = config.hidden_size // config.num_attention_heads
    if config.position_embedding == "rotary" and head_dim % 2:
        raise ValueError(f"rotary positions need an even head dimension, got {head_dim}; change hidden_size or heads.")
    if config.position_embedding == "sinusoidal" and config.hidden_size % 2:
        raise ValueError(f"sinusoidal positions need an even hidden_size, got {config.hidden_size}.")
    if config.position_embedding in ("learned", "sinusoidal") and config.max_position_embeddings <= 0:
        raise ValueError("max_position_embeddings must be positive for learned or sinusoidal positions.")
    if config.position_embedding == "disentangled":
        _validate_disentangled(config)
    if config.norm_unit_offset and config.norm_type != "rmsnorm":
        raise ValueError(f"norm_unit_offset=True is an RMSNorm switch; norm_type={config.norm_type!r} has none.")
    if config.sliding_window is not None:
        _validate_sliding_window(config)
    for name, off in DECODER_SWITCHES_OFF.items():
        if getattr(config, name) != off and config.model_type != "hfzoo_decoder":
            raise ValueError(f"{name}={getattr(config, name)!r} is a decoder switch; {config.model_type} has none.")
    if config.logit_softcap is not None and config.logit_softcap <= 0:
        raise ValueError(f"logit_softcap must be None (no cap) or positive, got {config.logit_softcap}.")
    if config.rope_theta <= 0:
        raise ValueError(f"rope_theta must be positive, got {config.rope_theta}.")
    for name in ("hidden_dropout", "attention_dropout"):
        if not 0.0 <= getattr(config, name) < 1.0:
            raise ValueError(f"{name} must be in [0, 1), got {getattr(config, name)}.")
    if config.norm_eps <= 0:
        raise ValueError(f"norm_eps must be positive, got {config.norm_eps}.")
    if config.initializer_range < 0:
        raise ValueError(f"initializer_range must be >= 0, got {config.initializer_range}.")
    if config.num_experts < 0 or config.num_experts == 1:
        raise ValueError(f"num_experts must be 0 (dense feed-forward) or >= 2, got {config.num_experts}.")
    if config.num_experts and not 1 <= config.num_experts_per_tok <= config.num_experts:
        raise ValueError(
            f"num_experts_per_tok ({config.num_experts_per_tok}) must be between 1 and num_experts ({config.num_experts})."
        )


def _validate_sliding_window(config) -> None:
    if config.sliding_window < 1:
        raise ValueError(f"sliding_window must be None (no window) or >= 1, got {config.sliding_window}.")
    if config.model_type != "hfzoo_decoder":
        raise ValueError(f"sliding_window={config.sliding_window} is a decoder switch; {config.model_type} has none: "
                         "set sliding_window=None.")  # fmt: skip
    if config.position_embedding in ("alibi", "relative", "disentangled"):
        # Their biases span every cached key; a sliding cache keeps only the window's.
        raise ValueError(
            f"sliding_window={config.sliding_window} needs positions the keys carry (rotary, learned, sinusoidal or "
            f"none), not position_embedding={config.position_embedding!r}."
        )


def _validate_disentangled(config) -> None:
    _check_choice("position_attention_terms", config.position_attention_terms, POSITION_ATTENTION_TERMS)
    if config.position_buckets < 0 or config.position_buckets == 1:
        raise ValueError(
            f"position_buckets must be 0 (no buckets) or >= 2 for disentangled positions, "
            f"got {config.position_buckets}."
        )
    # The logarithmic buckets divide by log((max_relative_positions - 1) / (position_buckets // 2)).
    longest_exact = config.position_buckets // 2
    if config.max_relative_positions <= longest_exact + 1:
        raise ValueError(
            f"max_relative_positions ({config.max_relative_positions}) must be larger than position_buckets // 2 + 1 "
            f"({longest_exact + 1}) for disentangled positions; raise it or lower position_buckets."
        )
