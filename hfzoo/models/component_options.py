"""The component switches every hfzoo family understands, and their validation.

Kept free of torch so that config files (which `save_pretrained` copies next to the weights) stay
light, and so that a wrong value fails when the config is created, not deep inside a forward pass.
"""

NORM_TYPES = ("layernorm", "rmsnorm")
NORM_POSITIONS = ("pre", "post")
# Gated variants (Shazeer, 2020) map to the activation of their gate.
GATED_ACTIVATIONS = {"swiglu": "silu", "geglu": "gelu"}
ACTIVATIONS = ("gelu", "gelu_new", "relu", "silu", *GATED_ACTIVATIONS)
POSITION_EMBEDDINGS = ("learned", "sinusoidal", "rotary", "alibi", "relative", "none")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ValueError(f"{name}={value!r} is not supported; choose one of {', '.join(map(repr, choices))}.")


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
