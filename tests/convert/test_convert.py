"""Native transformers models -> hfzoo -> native, for every family and every head both sides have.

Small random native models (seeded, built from small native configs, no downloads) must give the same outputs
once imported (max abs diff <= 1e-4), the same tokens from generate with a cache, and come back from hfzoo as
bit-identical tensors in a folder that loads with the plain Auto classes.
"""

import json

import pytest
import torch
import transformers
from tests.helpers.conversion_checks import TOLERANCE, max_difference, outputs
from tests.helpers.native_models import VOCAB, model_inputs, native_model

from hfzoo.convert import from_native, to_native


HEADS = {
    "gpt2": [
        "GPT2Model", "GPT2LMHeadModel", "GPT2ForSequenceClassification", "GPT2ForTokenClassification",
        "GPT2ForQuestionAnswering",
    ],
    "llama": [
        "LlamaModel", "LlamaForCausalLM", "LlamaForSequenceClassification", "LlamaForTokenClassification",
        "LlamaForQuestionAnswering",
    ],
    "mistral": [
        "MistralModel", "MistralForCausalLM", "MistralForSequenceClassification", "MistralForTokenClassification",
        "MistralForQuestionAnswering",
    ],
    "gemma": ["GemmaModel", "GemmaForCausalLM", "GemmaForSequenceClassification", "GemmaForTokenClassification"],
    "qwen2": [
        "Qwen2Model", "Qwen2ForCausalLM", "Qwen2ForSequenceClassification", "Qwen2ForTokenClassification",
        "Qwen2ForQuestionAnswering",
    ],
    "bert": [
        "BertModel", "BertForMaskedLM", "BertForSequenceClassification", "BertForTokenClassification",
        "BertForQuestionAnswering", "BertForMultipleChoice",
    ],
    "roberta": [
        "RobertaModel", "RobertaForMaskedLM", "RobertaForSequenceClassification", "RobertaForTokenClassification",
        "RobertaForQuestionAnswering", "RobertaForMultipleChoice",
    ],
    "distilbert": [
        "DistilBertModel", "DistilBertForMaskedLM", "DistilBertForTokenClassification", "DistilBertForQuestionAnswering",
    ],
    "electra": [
        "ElectraModel", "ElectraForPreTraining", "ElectraForMaskedLM", "ElectraForTokenClassification",
        "ElectraForQuestionAnswering", "ElectraForSequenceClassification", "ElectraForMultipleChoice",
    ],
    "t5": [
        "T5Model", "T5ForConditionalGeneration", "T5ForSequenceClassification", "T5ForQuestionAnswering",
        "T5ForTokenClassification", "T5EncoderModel",
    ],
    "mt5": [
        "MT5Model", "MT5ForConditionalGeneration", "MT5ForSequenceClassification", "MT5ForQuestionAnswering",
        "MT5ForTokenClassification", "MT5EncoderModel",
    ],
    "bart": ["BartModel", "BartForConditionalGeneration", "BartForSequenceClassification", "BartForQuestionAnswering"],
}
CASES = [(family, head) for family, heads in HEADS.items() for head in heads]
DECODER_FAMILIES = ("gpt2", "llama", "mistral", "qwen2", "gemma")


@pytest.mark.parametrize("family,head", CASES, ids=[head for _, head in CASES])
def test_native_to_zoo_to_native(family, head, tmp_path):
    native = native_model(family, head)
    inputs = model_inputs(family, head, native.config)

    zoo = from_native(native)
    assert type(zoo).__module__.startswith("hfzoo")
    imported = max_difference(outputs(native, inputs), outputs(zoo, inputs), inputs)
    assert imported <= TOLERANCE

    to_native(zoo, tmp_path)
    saved = json.loads((tmp_path / "config.json").read_text())
    assert saved["model_type"] == family and "auto_map" not in saved, "the export must not need remote code"
    assert not list(tmp_path.glob("*.py"))
    reloaded = getattr(transformers, head).from_pretrained(tmp_path).eval()
    exported = max_difference(outputs(zoo, inputs), outputs(reloaded, inputs), inputs)
    print(f"{head}: native -> hfzoo max abs diff {imported:.2e}, hfzoo -> native {exported:.2e}")
    assert exported <= TOLERANCE

    original, back = native.state_dict(), reloaded.state_dict()
    assert original.keys() == back.keys()
    changed = [key for key in original if not torch.equal(original[key], back[key])]
    assert not changed, f"the round trip changed {changed}"


@pytest.mark.parametrize("family,head", [
    ("gpt2", "GPT2LMHeadModel"), ("llama", "LlamaForCausalLM"), ("qwen2", "Qwen2ForCausalLM"),
    ("mistral", "MistralForCausalLM"), ("gemma", "GemmaForCausalLM"),
    ("t5", "T5ForConditionalGeneration"), ("mt5", "MT5ForConditionalGeneration"),
    ("bart", "BartForConditionalGeneration"),
])
def test_generate_with_cache_gives_the_same_tokens(family, head, tmp_path):
    # transformers' T5 sizes its generation cache by the encoder depth: equal depths here.
    native = native_model(family, head, **({"num_decoder_layers": 2} if family in ("t5", "mt5") else {}))
    zoo = from_native(native)
    prompt = torch.randint(4, VOCAB, (2, 6), generator=torch.Generator().manual_seed(2))
    settings = dict(max_new_tokens=8, do_sample=False, use_cache=True, pad_token_id=native.config.pad_token_id)
    if family in DECODER_FAMILIES:
        settings["eos_token_id"] = None  # run all steps: every one is compared
    expected = native.generate(prompt, **settings)
    assert torch.equal(zoo.generate(prompt, **settings), expected)
    to_native(zoo, tmp_path)
    auto_class = transformers.AutoModelForCausalLM if family in DECODER_FAMILIES else transformers.AutoModelForSeq2SeqLM
    assert torch.equal(auto_class.from_pretrained(tmp_path).generate(prompt, **settings), expected)


def test_original_t5_output_scaling_is_folded_into_the_final_norm():
    """Original T5 (tied head) scales the decoder output by d_model**-0.5; hfzoo has the factor in its final norm."""
    native = native_model("t5", "T5ForConditionalGeneration", feed_forward_proj="relu")
    native.config.scale_decoder_outputs = True
    inputs = model_inputs("t5", "T5ForConditionalGeneration", native.config)
    zoo = from_native(native)
    assert zoo.config.tie_word_embeddings and zoo.config.activation == "relu"
    assert max_difference(outputs(native, inputs), outputs(zoo, inputs), inputs) <= TOLERANCE


@pytest.mark.parametrize("feed_forward_proj,activation", [
    ("gated-gelu", "geglu_tanh"), ("gated-gelu_python", "geglu"), ("gated-silu", "swiglu"), ("gelu_new", "gelu_new"),
])
def test_t5_feed_forward_kinds_map_to_their_hfzoo_activation(feed_forward_proj, activation, tmp_path):
    """T5 v1.1's `gated-gelu` is a tanh-GELU gate (`geglu_tanh`), hfzoo's exact-GELU gate exports as
    `gated-gelu_python`: each kind imports with equal logits and exports under its own name."""
    native = native_model("t5", "T5ForConditionalGeneration", feed_forward_proj=feed_forward_proj)
    inputs = model_inputs("t5", "T5ForConditionalGeneration", native.config)
    zoo = from_native(native)
    assert zoo.config.activation == activation
    assert max_difference(outputs(native, inputs), outputs(zoo, inputs), inputs) <= TOLERANCE
    to_native(zoo, tmp_path)
    assert json.loads((tmp_path / "config.json").read_text())["feed_forward_proj"] == feed_forward_proj


@pytest.mark.parametrize("family,head,overrides,named", [
    ("t5", "T5ForConditionalGeneration", {"feed_forward_proj": "gated-relu"}, "feed_forward_proj='gated-relu'"),
    ("t5", "T5ForConditionalGeneration", {"dense_act_fn": "gelu"}, "dense_act_fn='gelu'"),
    ("llama", "LlamaForCausalLM", {"rope_parameters": {"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4}}, "rope_type='linear'"),
    ("qwen2", "Qwen2ForCausalLM", {"use_sliding_window": True}, "use_sliding_window=True"),
    ("distilbert", "DistilBertModel", {"sinusoidal_pos_embds": True}, "sinusoidal_pos_embds=True"),
    ("gemma", "GemmaModel", {"use_bidirectional_attention": True}, "use_bidirectional_attention=True"),
    ("mistral", "MistralModel", {"layer_types": ["sliding_attention", "full_attention"]}, "layer_types="),
    ("bert", "BertModel", {"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
    ("gpt2", "GPT2Model", {"scale_attn_by_inverse_layer_idx": True}, "scale_attn_by_inverse_layer_idx=True"),
    ("bart", "BartModel", {"decoder_ffn_dim": 64}, "decoder_ffn_dim=64"),
    ("electra", "ElectraForMaskedLM", {"hidden_act": "relu"}, "hidden_act='relu'"),  # the generator head is GELU
    ("electra", "ElectraModel", {"position_embedding_type": "relative_key"}, "position_embedding_type='relative_key'"),
])
def test_native_options_hfzoo_cannot_compute_are_refused(family, head, overrides, named):
    native = native_model(family, head)
    for name, value in overrides.items():
        setattr(native.config, name, value)
    with pytest.raises(ValueError, match=named.replace("[", r"\[")):
        from_native(native)


def test_electra_embeddings_as_wide_as_the_hidden_states_have_no_projection(tmp_path):
    """ELECTRA-Base and -Large embed in hidden_size: hfzoo's config leaves embedding_size unset, no projection."""
    native = native_model("electra", "ElectraForMaskedLM", embedding_size=32)
    assert not hasattr(native.electra, "embeddings_project")
    zoo = from_native(native)
    assert zoo.config.embedding_size is None and isinstance(zoo.model.embeddings_project, torch.nn.Identity)
    inputs = model_inputs("electra", "ElectraForMaskedLM", native.config)
    assert max_difference(outputs(native, inputs), outputs(zoo, inputs), inputs) <= TOLERANCE
    back = to_native(zoo, tmp_path)
    assert all(torch.equal(value, back.state_dict()[key]) for key, value in native.state_dict().items())


def test_nonzero_final_logits_bias_is_refused():
    native = native_model("bart", "BartForConditionalGeneration")
    native.final_logits_bias.fill_(0.5)
    with pytest.raises(ValueError, match="final_logits_bias is not all zeros"):
        from_native(native)
