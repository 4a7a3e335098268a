"""Hypothesis strategies over the model switch space, which the property tests of every family share: valid tiny
decoder configs (the switches the families have in common) and, per setting, the overrides that break it."""

import hypothesis.strategies as st
from hypothesis import HealthCheck, settings

from hfzoo.models.component_options import ACTIVATIONS, NORM_POSITIONS, NORM_TYPES, POSITION_EMBEDDINGS

VOCAB = 97


PROPERTY_SETTINGS = settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]
)


@st.composite
def valid_configs(draw) -> dict:
    """Keyword arguments of a valid tiny ZooDecoderConfig: any mix of switches, sizes kept compatible."""
    heads = draw(st.sampled_from([1, 2, 4]))
    num_experts = draw(st.sampled_from([0, 2, 4]))
    return dict(
        vocab_size=VOCAB,
        # A multiple of 2 * heads: even head_dim (rotary) and even hidden_size (sinusoidal).
        hidden_size=draw(st.sampled_from([size for size in range(32, 65) if size % (2 * heads) == 0])),
        num_hidden_layers=draw(st.integers(1, 2)),
        num_attention_heads=heads,
        num_key_value_heads=draw(st.sampled_from([kv for kv in (1, 2, 4) if heads % kv == 0])),
        intermediate_size=draw(st.integers(8, 96)),
        activation=draw(st.sampled_from(ACTIVATIONS)),
        norm_type=draw(st.sampled_from(NORM_TYPES)),
        norm_position=draw(st.sampled_from(NORM_POSITIONS)),
        norm_bias=draw(st.booleans()),
        position_embedding=draw(st.sampled_from(POSITION_EMBEDDINGS)),
        max_position_embeddings=32,
        attention_bias=draw(st.booleans()),
        mlp_bias=draw(st.booleans()),
        tie_word_embeddings=draw(st.booleans()),
        hidden_dropout=draw(st.sampled_from([0.0, 0.1, 0.3])),
        attention_dropout=draw(st.sampled_from([0.0, 0.1, 0.3])),
        num_experts=num_experts,
        num_experts_per_tok=draw(st.integers(1, num_experts)) if num_experts else 2,
        embedding_norm=draw(st.booleans()),
        scale_embeddings=draw(st.booleans()),
    )


def experts_without_tokens(model, run) -> set[str]:
    """Parameter-name prefixes of experts that `run()` routed no token to: those cannot get a gradient."""
    calls: set[str] = set()
    handles = [
        module.register_forward_pre_hook(lambda module, args, name=name: calls.add(name))
        for name, module in model.named_modules()
        if name.rsplit(".", 2)[-2:-1] == ["experts"]
    ]
    try:
        run()
    finally:
        for handle in handles:
            handle.remove()
    every_expert = {name for name, _ in model.named_modules() if name.rsplit(".", 2)[-2:-1] == ["experts"]}
    return {name + "." for name in every_expert - calls}


def invalid_choice(choices):
    return st.text(min_size=1, max_size=10).filter(lambda value: value not in choices)


# setting the message must name -> a strategy for the overrides that break it
BREAKERS = {
    "activation": lambda c: st.fixed_dictionaries({"activation": invalid_choice(ACTIVATIONS)}),
    "norm_type": lambda c: st.fixed_dictionaries({"norm_type": invalid_choice(NORM_TYPES)}),
    "norm_position": lambda c: st.fixed_dictionaries({"norm_position": invalid_choice(NORM_POSITIONS)}),
    "position_embedding": lambda c: st.fixed_dictionaries({"position_embedding": invalid_choice(POSITION_EMBEDDINGS)}),
    "hidden_size": lambda c: st.sampled_from([3, 5, 7]).flatmap(
        lambda heads: st.fixed_dictionaries(
            {
                "num_attention_heads": st.just(heads),
                "num_key_value_heads": st.just(heads),
                "hidden_size": st.integers(32, 64).filter(lambda size: size % heads),
            }
        )
    ),
    "num_key_value_heads": lambda c: st.fixed_dictionaries(
        {"num_key_value_heads": st.integers(2, 9).filter(lambda kv: c["num_attention_heads"] % kv)}
    ),
    "rotary": lambda c: st.sampled_from([9, 11, 13, 15]).map(
        lambda head_dim: {
            "position_embedding": "rotary",
            "hidden_size": head_dim * c["num_attention_heads"],
        }
    ),
    "hidden_dropout": lambda c: st.fixed_dictionaries(
        {"hidden_dropout": st.floats(1.0, 5.0) | st.floats(-5.0, -1e-3)}
    ),
    "attention_dropout": lambda c: st.fixed_dictionaries(
        {"attention_dropout": st.floats(1.0, 5.0) | st.floats(-5.0, -1e-3)}
    ),
    "num_experts": lambda c: st.fixed_dictionaries({"num_experts": st.sampled_from([1, -1, -4])}),
    "num_experts_per_tok": lambda c: st.integers(2, 4).flatmap(
        lambda experts: st.fixed_dictionaries(
            {
                "num_experts": st.just(experts),
                "num_experts_per_tok": st.integers(experts + 1, 8) | st.integers(-2, 0),
            }
        )
    ),
}

