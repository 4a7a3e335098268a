"""hfzoo -> native: models built from the presets export to transformers' own classes with equal outputs and
tokens, refuse (naming the switch) what the native class cannot express, and the `hfzoo convert` command does
both directions on folders, tokenizer included."""

import json

import pytest
import torch
import transformers
from tests.helpers.conversion_checks import TOLERANCE, max_difference, outputs
from tests.helpers.native_models import EXPORTS, SMALL, VOCAB, model_inputs, native_model, zoo_model

import hfzoo
from hfzoo.cli import main as hfzoo_cli
from hfzoo.convert import FAMILIES, from_native, to_native


@pytest.mark.parametrize("preset", list(EXPORTS))
def test_preset_models_export_with_equal_outputs_and_tokens(preset, tmp_path):
    _, family, auto_class = EXPORTS[preset]
    zoo = zoo_model(preset)
    to_native(zoo, tmp_path)
    native = auto_class.from_pretrained(tmp_path).eval()
    assert native.config.model_type == family and not list(tmp_path.glob("*.py"))
    inputs = model_inputs(family, type(native).__name__, native.config)
    inputs.pop("token_type_ids", None)  # RoBERTa's export has one segment
    assert max_difference(outputs(zoo, inputs), outputs(native, inputs), inputs) <= TOLERANCE
    if family not in ("bert", "roberta"):
        prompt = torch.randint(4, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
        settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=zoo.config.pad_token_id, eos_token_id=None)
        assert torch.equal(native.generate(prompt, **settings), zoo.generate(prompt, **settings))


@pytest.mark.parametrize("preset,overrides,native_type,named", [
    ("gpt-tiny", {"num_experts": 4}, None, "num_experts=4"),
    ("llama-tiny", {"position_embedding": "alibi"}, "llama", "position_embedding='alibi'"),
    ("llama-tiny", {"position_embedding": "alibi"}, None, "position_embedding='alibi'"),
    ("llama-tiny", {"attention_output_bias": True}, "llama", "attention_output_bias=True"),
    ("llama-tiny", {"norm_unit_offset": True}, None, "scale_embeddings=False"),
    ("gpt-tiny", {"norm_position": "post"}, None, "norm_position='post'"),
    ("bert-tiny", {"norm_position": "pre"}, None, "norm_position='pre'"),
    ("t5-tiny", {"num_key_value_heads": 2}, None, "num_key_value_heads=2"),
    ("roberta-tiny", {}, "distilbert", "norm_eps=1e-05"),
    ("roberta-tiny", {"norm_eps": 1e-12}, "distilbert", "add_pooling_layer=True"),
    ("bart-tiny", {"share_embeddings": False}, None, "share_embeddings=False"),
    ("transformer-tiny", {}, None, "position_embedding='sinusoidal'"),
    ("bert-tiny", {"embedding_size": 16}, "bert", "embedding_size=16"),
    ("roberta-tiny", {"embedding_size": 16}, None, "type_vocab_size=0.*embedding_size=16"),  # every family's refusal
    ("bert-tiny", {"activation": "relu"}, "electra", "activation='relu'"),  # ELECTRA's generator head is GELU
    # The speedrun's switches (issue 36), which no native decoder has.
    ("llama-tiny", {"qk_norm": True}, None, "qk_norm=True"),
    ("gpt-tiny", {"logit_softcap": 30.0}, "gpt2", "logit_softcap=30.0"),
    ("gpt-tiny", {"activation": "relu2"}, "gpt2", "activation='relu2'"),
    ("llama-tiny", {"activation": "relu2"}, "llama", "activation='relu2'"),
])
def test_components_the_native_class_cannot_express_are_refused(preset, overrides, native_type, named, tmp_path):
    with pytest.raises(ValueError, match=named):
        to_native(zoo_model(preset, **overrides), tmp_path / "out", native_type=native_type)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("overrides,family,native_class", [
    ({"attention_bias": True, "attention_output_bias": False}, "qwen2", "Qwen2ForCausalLM"),
    ({"sliding_window": 3}, "mistral", "MistralForCausalLM"),
    ({"norm_unit_offset": True, "scale_embeddings": True, "activation": "geglu_tanh"}, "gemma", "GemmaForCausalLM"),
])
def test_a_rotary_decoder_exports_to_the_family_of_its_switches(overrides, family, native_class, tmp_path):
    """q/k/v biased, the output not: Qwen2's layout; a sliding window: Mistral's; norms scaling by 1 + weight:
    Gemma's. The export picks that family."""
    zoo = zoo_model("llama-tiny", num_key_value_heads=2, **overrides)
    native = to_native(zoo, tmp_path)
    assert type(native).__name__ == native_class
    inputs = model_inputs(family, native_class, native.config)
    assert max_difference(outputs(zoo, inputs), outputs(native, inputs), inputs) <= TOLERANCE
    prompt = torch.randint(4, VOCAB, (2, 5), generator=torch.Generator().manual_seed(3))
    settings = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, eos_token_id=None)
    assert torch.equal(native.generate(prompt, **settings), zoo.generate(prompt, **settings))


@pytest.mark.parametrize("head,native_class,embedding_size", [
    ("ZooEncoderForMaskedLM", "ElectraForMaskedLM", 16),
    ("ZooEncoderForReplacedTokenDetection", "ElectraForPreTraining", 16),
    ("ZooEncoderForReplacedTokenDetection", "ElectraForPreTraining", None),  # what `--objective electra` saves
])
def test_encoders_with_narrower_embeddings_or_a_discriminator_head_export_to_electra(
    head, native_class, embedding_size, tmp_path
):
    """ELECTRA alone holds narrower embeddings (`embedding_size`) and the discriminator: the export picks it."""
    zoo = zoo_model("bert-tiny", getattr(hfzoo, head), embedding_size=embedding_size, max_position_embeddings=64,
                    pad_token_id=0)  # fmt: skip
    zoo.save_pretrained(tmp_path / "zoo")
    native = to_native(tmp_path / "zoo", tmp_path / "native")
    assert type(native).__name__ == native_class
    inputs = model_inputs("electra", native_class, native.config)
    assert max_difference(outputs(zoo, inputs), outputs(native, inputs), inputs) <= TOLERANCE


def test_a_classifier_fine_tuned_on_an_imported_discriminator_exports_as_electras_classifier(tmp_path):
    """The imported config keeps ELECTRA's GELU pooler on, so the task head hfzoo adds is the head of
    ElectraForSequenceClassification; BERT's tanh pooler is refused there, naming the switch."""
    config = from_native(native_model("electra", "ElectraForPreTraining")).config
    assert config.add_pooling_layer and config.pooler_activation == "gelu"
    torch.manual_seed(0)
    classifier = hfzoo.ZooEncoderForSequenceClassification(config).eval()
    native = to_native(classifier, tmp_path / "native")
    assert type(native).__name__ == "ElectraForSequenceClassification"
    inputs = model_inputs("electra", "ElectraForSequenceClassification", native.config)
    assert max_difference(outputs(classifier, inputs), outputs(native, inputs), inputs) <= TOLERANCE
    with pytest.raises(ValueError, match=r"ElectraForSequenceClassification .*pooler_activation='tanh'"):
        to_native(zoo_model("bert-tiny", hfzoo.ZooEncoderForSequenceClassification), tmp_path / "bert",
                  native_type="electra")  # fmt: skip


def test_a_bare_encoder_with_a_pooler_is_no_electra_model(tmp_path):
    with pytest.raises(ValueError, match=r"ElectraModel \(no pooler\) cannot express .*add_pooling_layer=True"):
        to_native(zoo_model("bert-tiny", hfzoo.ZooEncoderModel), tmp_path / "out", native_type="electra")
    assert not (tmp_path / "out").exists()


def test_encoder_without_a_pooler_cannot_become_a_pooled_classifier(tmp_path):
    zoo = zoo_model("bert-tiny", hfzoo.ZooEncoderForSequenceClassification, add_pooling_layer=False)
    with pytest.raises(ValueError, match="add_pooling_layer=False"):
        to_native(zoo, tmp_path)


def test_a_preset_given_on_import_must_fit_the_weights():
    native = native_model("bert", "BertForMaskedLM")
    with pytest.raises(ValueError, match=r"hidden_size=128 \(the native model has 32\)"):
        from_native(native, "bert-tiny")
    fitting = hfzoo.preset_config("bert-tiny", **{**SMALL, "max_position_embeddings": 64, "hidden_dropout": 0.3})
    zoo = from_native(native, fitting)
    assert zoo.config.hidden_dropout == 0.3 and zoo.config.pad_token_id == native.config.pad_token_id


def test_cli_converts_folders_both_ways_with_the_tokenizer(tokenizer, tmp_path, capsys):
    native = native_model("gpt2", "GPT2LMHeadModel", vocab_size=len(tokenizer))
    native.save_pretrained(tmp_path / "native")
    tokenizer.save_pretrained(tmp_path / "native")
    hfzoo_cli(["convert", "from-native", str(tmp_path / "native"), str(tmp_path / "zoo")])
    assert "ZooDecoderForCausalLM" in capsys.readouterr().out
    assert json.loads((tmp_path / "zoo" / "config.json").read_text())["native_model_type"] == "gpt2"
    hfzoo_cli(["convert", "to-native", str(tmp_path / "zoo"), str(tmp_path / "back")])
    for folder in ("zoo", "back"):
        assert (tmp_path / folder / "tokenizer.json").is_file()
    back = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back")
    original = native.state_dict()
    assert all(torch.equal(original[key], value) for key, value in back.state_dict().items())
    ids = transformers.AutoTokenizer.from_pretrained(tmp_path / "back")("def main():", return_tensors="pt").input_ids
    assert torch.equal(back(ids).logits, native(ids).logits)


def test_cli_help_documents_both_directions(capsys):
    with pytest.raises(SystemExit):
        hfzoo_cli(["convert", "--help"])
    text = capsys.readouterr().out
    assert "from-native" in text and "to-native" in text and "no remote code" in text


def test_cli_help_lists_every_native_type_the_converters_have(capsys):
    with pytest.raises(SystemExit):
        hfzoo_cli(["convert", "--help"])
    text = capsys.readouterr().out
    for model_type, family in FAMILIES.items():
        line = next(line for line in text.splitlines() if line.split()[:1] == [model_type])
        assert all(head.native_class in line for head in family.heads), line
    with pytest.raises(SystemExit):
        hfzoo_cli(["convert", "to-native", "--help"])
    assert "{" + ",".join(FAMILIES) + "}" in capsys.readouterr().out


def test_roberta_presets_export_as_built(tmp_path):
    """A `roberta-*` preset carries RoBERTa's token ids (pad 1, which its positions count from; bos 0; eos 2), so
    the model it builds exports without any override."""
    for preset in ("roberta-tiny", "roberta-small", "roberta-base"):
        config = hfzoo.preset_config(preset)
        assert (config.pad_token_id, config.bos_token_id, config.eos_token_id) == (1, 0, 2), preset
    zoo = hfzoo.ZooEncoderForMaskedLM(hfzoo.preset_config("roberta-tiny")).eval()
    zoo.save_pretrained(tmp_path / "zoo")
    hfzoo_cli(["convert", "to-native", str(tmp_path / "zoo"), str(tmp_path / "native")])
    native = transformers.AutoModelForMaskedLM.from_pretrained(tmp_path / "native").eval()
    assert native.config.model_type == "roberta" and native.config.pad_token_id == 1
    inputs = {"input_ids": torch.randint(3, 4096, (2, 7), generator=torch.Generator().manual_seed(0))}
    inputs["attention_mask"] = torch.ones_like(inputs["input_ids"])
    assert max_difference(outputs(zoo, inputs), outputs(native, inputs), inputs) <= TOLERANCE
