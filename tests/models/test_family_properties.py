"""The switch-space property tests of `test_decoder_properties.py`, for the encoder and encoder-decoder families:
every valid combination of switches (the shared ones, each family's own, and disentangled attention's buckets)
builds, trains one step with a gradient on every weight that saw data, and round-trips through save/load; every
invalid one is refused at config time with a message naming the setting."""

import tempfile

import hypothesis.strategies as st
import pytest
import torch
from hypothesis import given, settings
from tests.helpers.switch_strategies import (
    BREAKERS,
    PROPERTY_SETTINGS,
    VOCAB,
    experts_without_tokens,
    invalid_choice,
    valid_configs,
)
from transformers import AutoModelForMaskedLM, AutoModelForSeq2SeqLM

from hfzoo import ZooEncoderConfig, ZooEncoderDecoderConfig
from hfzoo.models.component_options import POSITION_ATTENTION_TERMS, POSITION_EMBEDDINGS

FAMILIES = {
    "encoder": (ZooEncoderConfig, AutoModelForMaskedLM),
    "encoder_decoder": (ZooEncoderDecoderConfig, AutoModelForSeq2SeqLM),
}
# Building and training dominate: fewer examples per family than the decoder's 25 (each family runs its own).
TRAINING_SETTINGS = settings(parent=PROPERTY_SETTINGS, max_examples=12)


@st.composite
def family_configs(draw, family: str) -> dict:
    """A valid tiny config of `family`: the decoder's switch mix, disentangled attention drawn more often (with
    buckets small enough for 9 tokens to reach the logarithmic ones), and the family's own switches."""
    kwargs = draw(valid_configs())
    buckets = draw(st.sampled_from([0, 2, 4, 8, 256]))
    kwargs.update(
        position_embedding=draw(st.sampled_from((*POSITION_EMBEDDINGS, "disentangled"))),
        position_buckets=buckets,
        max_relative_positions=draw(st.integers(buckets // 2 + 2, 600)),
        position_attention_terms=draw(st.sampled_from(POSITION_ATTENTION_TERMS)),
    )
    if family == "encoder":
        kwargs.update(
            type_vocab_size=draw(st.integers(0, 3)),
            add_pooling_layer=draw(st.booleans()),
            classifier_dropout=draw(st.sampled_from([None, 0.0, 0.2])),
        )
    else:
        kwargs.update(num_decoder_layers=draw(st.integers(1, 2)), share_embeddings=draw(st.booleans()))
    return kwargs


def training_batch(family: str) -> dict[str, torch.Tensor]:
    """Two right-padded rows (9 and 6 real tokens) with their labels: masked positions, or a padded target."""
    input_ids = torch.randint(1, VOCAB, (2, 9))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 6:] = 0
    input_ids = input_ids * attention_mask
    if family == "encoder":
        labels = input_ids.masked_fill((torch.arange(9) % 3 != 1) | (attention_mask == 0), -100)
        return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}
    labels = torch.randint(1, VOCAB, (2, 7))
    labels[0, 5:] = -100
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def compared_outputs(family: str, output, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """The logits a save/load round trip must reproduce: real source tokens (encoder) or every target position."""
    return output.logits[batch["attention_mask"].bool()] if family == "encoder" else output.logits


@TRAINING_SETTINGS
@pytest.mark.parametrize("family", list(FAMILIES))
@given(data=st.data(), seed=st.integers(0, 2**16))
def test_valid_combinations_build_train_and_round_trip(family, data, seed):
    kwargs = data.draw(family_configs(family))
    config_cls, auto_class = FAMILIES[family]
    torch.manual_seed(seed)
    model = auto_class.from_config(config_cls(**kwargs)).train()
    batch = training_batch(family)

    outputs = {}
    idle_experts = experts_without_tokens(model, lambda: outputs.update(model(**batch)))
    assert torch.isfinite(outputs["loss"])
    outputs["loss"].backward()
    for name, parameter in model.named_parameters():
        if any(name.startswith(prefix) for prefix in idle_experts):
            assert parameter.grad is None, f"{name} got a gradient without receiving tokens"
            continue
        assert parameter.grad is not None, f"{name} got no gradient"
        assert torch.isfinite(parameter.grad).all(), name

    model.eval()
    with tempfile.TemporaryDirectory() as directory, torch.no_grad():
        model.save_pretrained(directory)
        loaded = auto_class.from_pretrained(directory).eval()
        expected = compared_outputs(family, model(**batch), batch)
        logits = compared_outputs(family, loaded(**batch), batch)
    assert loaded.config.to_diff_dict() == model.config.to_diff_dict()
    state, loaded_state = model.state_dict(), loaded.state_dict()
    assert state.keys() == loaded_state.keys()
    assert all(torch.equal(state[key], loaded_state[key]) for key in state), "weights differ after save/load"
    # 1e-6, not torch.equal: loaded weights sit at other memory alignments, which changes BLAS rounding.
    torch.testing.assert_close(logits, expected, atol=1e-6, rtol=0)


def _disentangled(overrides: st.SearchStrategy) -> st.SearchStrategy:
    return overrides.map(lambda values: {"position_embedding": "disentangled", **values})


# setting the message must name -> a strategy for the overrides that break it (on top of the decoder's)
FAMILY_BREAKERS = {
    "encoder": {
        "type_vocab_size": lambda c: st.fixed_dictionaries({"type_vocab_size": st.integers(-5, -1)}),
        "classifier_dropout": lambda c: st.fixed_dictionaries(
            {"classifier_dropout": st.floats(1.0, 5.0) | st.floats(-5.0, -1e-3)}
        ),
    },
    "encoder_decoder": {
        "num_decoder_layers": lambda c: st.fixed_dictionaries({"num_decoder_layers": st.integers(-3, 0)}),
    },
}
DISENTANGLED_BREAKERS = {
    "position_buckets": lambda c: _disentangled(
        st.fixed_dictionaries({"position_buckets": st.integers(-8, -1) | st.just(1)})
    ),
    "max_relative_positions": lambda c: _disentangled(
        st.integers(2, 256).flatmap(
            lambda buckets: st.fixed_dictionaries(
                {"position_buckets": st.just(buckets), "max_relative_positions": st.integers(-4, buckets // 2 + 1)}
            )
        )
    ),
    "position_attention_terms": lambda c: _disentangled(
        st.fixed_dictionaries({"position_attention_terms": invalid_choice(POSITION_ATTENTION_TERMS)})
    ),
}


@PROPERTY_SETTINGS
@pytest.mark.parametrize("family", list(FAMILIES))
@given(data=st.data())
def test_invalid_combinations_raise_value_error_naming_the_setting(family, data):
    breakers = {**BREAKERS, **DISENTANGLED_BREAKERS, **FAMILY_BREAKERS[family]}
    kwargs = data.draw(family_configs(family))
    setting = data.draw(st.sampled_from(sorted(breakers)))
    kwargs.update(data.draw(breakers[setting](kwargs)))
    with pytest.raises(ValueError, match=setting):
        FAMILIES[family][0](**kwargs)
