"""transformers' static cache (`generate(..., cache_implementation="static")`) and compiled decoding give what the
dynamic cache gives: the same greedy tokens and logits within 1e-5, for every generating family and every position
scheme that biases attention scores (ALiBi, T5's buckets, DeBERTa's disentangled terms), on left-padded batches.

A static cache holds `max_cache_len` slots from the first step, the unwritten ones masked, so position biases must
span all of them and count the new tokens from the cache's tensor counter (what these tests would catch).
"""

import pytest
import torch
import torch._dynamo
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM
from transformers.generation.configuration_utils import CompileConfig

from hfzoo.core.cpu_layout import tune_for_cpu
from hfzoo.core.presets import preset_config

CASES = [
    ("gpt-tiny", {}),
    ("llama-tiny", {}),
    ("gpt-tiny", {"position_embedding": "alibi"}),
    ("llama-tiny", {"position_embedding": "relative"}),
    ("gpt-tiny", {"position_embedding": "disentangled"}),
    ("t5-tiny", {}),
    ("bart-tiny", {}),
    ("transformer-tiny", {}),
    ("t5-tiny", {"position_embedding": "alibi"}),
    ("bart-tiny", {"position_embedding": "disentangled"}),
]


def _model_and_batch(name: str, overrides: dict):
    torch.manual_seed(0)
    config = preset_config(name, **overrides)
    model_class = AutoModelForSeq2SeqLM if config.is_encoder_decoder else AutoModelForCausalLM
    model = model_class.from_config(config).eval()
    input_ids = torch.randint(3, 100, (3, 7))
    attention_mask = torch.ones_like(input_ids)
    attention_mask[0, :3] = 0  # left padding of different lengths, one row without
    attention_mask[2, :1] = 0
    input_ids = input_ids.masked_fill(attention_mask == 0, 0)
    return model, dict(input_ids=input_ids, attention_mask=attention_mask)


def _generate(model, batch: dict, **kwargs):
    return model.generate(
        **batch, max_new_tokens=6, do_sample=False, output_logits=True, return_dict_in_generate=True, pad_token_id=0,
        **kwargs,
    )  # fmt: skip


def _assert_same(dynamic, static) -> None:
    assert torch.equal(dynamic.sequences, static.sequences)
    for step, (expected, found) in enumerate(zip(dynamic.logits, static.logits, strict=True)):
        torch.testing.assert_close(found, expected, rtol=0, atol=1e-5, msg=lambda m: f"step {step}: {m}")


CASE_IDS = [f"{name}-{overrides.get('position_embedding', 'preset')}" for name, overrides in CASES]


@pytest.mark.parametrize(("name", "overrides"), CASES, ids=CASE_IDS)
def test_static_cache_generates_what_the_dynamic_cache_does(name: str, overrides: dict):
    model, batch = _model_and_batch(name, overrides)
    dynamic = _generate(model, batch)
    static = _generate(model, batch, cache_implementation="static")
    _assert_same(dynamic, static)


# llama-tiny is slow: the decoder family's compiled static-cache decoding is also checked against eager, on gpt-tiny,
# by the recompilation test below.
@pytest.mark.slow  # compiling two decoders, 60 s; the recompile test below decodes compiled
@pytest.mark.parametrize("name", ["llama-tiny", "t5-tiny"])
def test_compiled_decoding_with_a_static_cache_generates_what_eager_does(name: str):
    """One graph per decoding step (`fullgraph=True` raises on any graph break); on CPU generate compiles only when
    the compile config says so (`_compile_all_devices`)."""
    model, batch = _model_and_batch(name, {})
    dynamic = _generate(model, batch)
    compile_config = CompileConfig(fullgraph=True, mode="default")
    compile_config._compile_all_devices = True
    torch._dynamo.reset()
    torch._dynamo.utils.counters.clear()
    compiled = _generate(model, batch, cache_implementation="static", compile_config=compile_config)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] >= 1  # the decoding steps did run compiled
    _assert_same(dynamic, compiled)


@pytest.mark.slow  # 43 s of compiling; make test keeps the eager static-cache decoding tests above
def test_compiled_decoding_recompiles_for_a_new_batch_size_without_a_graph_break():
    """A second batch size makes dynamo retrace with symbolic shapes (automatic dynamic): every shape test in the
    model's code must still hold for a symbol (found on a GPU, where the benchmark decodes at batch 1, then 8). The
    model is tuned as `hfzoo generate` runs it: the few-rows head's row count is one such shape test."""
    model, batch = _model_and_batch("gpt-tiny", {})
    tune_for_cpu(model)
    compile_config = CompileConfig(fullgraph=True, mode="default")
    compile_config._compile_all_devices = True
    torch._dynamo.reset()
    _generate(model, batch, cache_implementation="static", compile_config=compile_config)
    smaller = {key: value[1:] for key, value in batch.items()}
    compiled = _generate(model, smaller, cache_implementation="static", compile_config=compile_config)
    _assert_same(_generate(model, smaller), compiled)
