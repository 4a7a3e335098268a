"""No silent weight drops: every hfzoo head, saved, comes back through the Auto class that names it with every weight
loaded (transformers' load report: no missing, no unexpected keys), and a pretrained head is never started from random
values because a checkpoint of another head was loaded into it."""

import copy

import pytest
import torch
import transformers
from transformers import AutoModelForMaskedLM, AutoModelForPreTraining

import hfzoo
from hfzoo.core.registration import FAMILIES
from hfzoo.models import (
    ZooEncoderForMaskedLM,
    ZooEncoderForPreTraining,
    ZooEncoderForReplacedTokenDetection,
    ZooEncoderForSequenceClassification,
)

# One preset per family (the decoder needs a pad token to classify batches).
PRESETS = {"decoder": "gpt-tiny", "encoder": "bert-tiny", "encoder_decoder": "t5-tiny", "bilm": "elmo-tiny"}
HEADS = [
    pytest.param(preset, auto_name, head, id=f"{preset}-{auto_name}-{head.__name__}")
    for preset in PRESETS.values()
    for auto_name, heads in FAMILIES[type(hfzoo.preset_config(preset))].heads_by_auto_class.items()
    for head in heads
]


def saved(head: type, preset: str, folder) -> str:
    torch.manual_seed(0)
    head(copy.deepcopy(hfzoo.preset_config(preset, pad_token_id=0))).save_pretrained(folder)
    return folder


@pytest.mark.parametrize(("preset", "auto_name", "head"), HEADS)
def test_each_head_comes_back_whole_through_its_auto_class(preset, auto_name, head, tmp_path):
    folder = saved(head, preset, tmp_path)
    model, loading_info = getattr(transformers, auto_name).from_pretrained(folder, output_loading_info=True)
    assert type(model) is head
    assert not loading_info["missing_keys"] and not loading_info["unexpected_keys"], loading_info


def test_every_family_and_auto_class_is_covered():
    assert {type(hfzoo.preset_config(preset)) for preset in PRESETS.values()} == set(FAMILIES)


@pytest.mark.parametrize("wrong_head", [ZooEncoderForPreTraining, ZooEncoderForMaskedLM])
def test_a_discriminator_loaded_as_a_language_model_head_is_refused_naming_its_class(wrong_head, tmp_path):
    folder = saved(ZooEncoderForReplacedTokenDetection, "bert-tiny", tmp_path)
    with pytest.raises(ValueError, match=r"holds a ZooEncoderForReplacedTokenDetection checkpoint.*lm_head\.dense\.weight"
                       r".*AutoModelForPreTraining\.from_pretrained, which picks it"):  # fmt: skip
        wrong_head.from_pretrained(folder)


def test_a_masked_lm_loaded_as_a_discriminator_is_refused_naming_its_class(tmp_path):
    folder = saved(ZooEncoderForMaskedLM, "bert-tiny", tmp_path)
    with pytest.raises(ValueError, match=r"holds a ZooEncoderForMaskedLM checkpoint.*dense_prediction\.weight.*"
                       r"Load it with ZooEncoderForMaskedLM\.from_pretrained \(or AutoModelForPreTraining"):  # fmt: skip
        ZooEncoderForReplacedTokenDetection.from_pretrained(folder)


def test_heads_that_share_pretrained_weights_still_load_each_other(tmp_path):
    """Not a mismatch: BERT's MLM + NSP checkpoint gives the masked-LM head its weights (NSP is left out, as in
    transformers), a masked-LM checkpoint starts MLM + NSP pretraining, and any checkpoint starts a task head."""
    pretraining = saved(ZooEncoderForPreTraining, "bert-tiny", tmp_path / "pretraining")
    masked_lm = saved(ZooEncoderForMaskedLM, "bert-tiny", tmp_path / "masked_lm")
    discriminator = saved(ZooEncoderForReplacedTokenDetection, "bert-tiny", tmp_path / "discriminator")
    _, loading_info = AutoModelForMaskedLM.from_pretrained(pretraining, output_loading_info=True)
    assert not loading_info["missing_keys"]
    _, loading_info = ZooEncoderForPreTraining.from_pretrained(masked_lm, output_loading_info=True)
    assert loading_info["missing_keys"] == {"seq_relationship.weight", "seq_relationship.bias"} | {
        "model.pooler.dense.weight", "model.pooler.dense.bias"
    }  # fmt: skip
    classifier, loading_info = ZooEncoderForSequenceClassification.from_pretrained(
        discriminator, output_loading_info=True
    )
    assert all(not key.startswith("model.layers") for key in loading_info["missing_keys"])
    assert isinstance(AutoModelForPreTraining.from_pretrained(discriminator), ZooEncoderForReplacedTokenDetection)


def test_a_bare_model_starts_a_new_language_model_head_but_a_classifier_checkpoint_does_not(tmp_path):
    """A bare checkpoint has no head to lose; a classifier's (an untied LM head, so lm_head is not the embedding)
    would drop its score head and start the LM head from random values."""
    config = hfzoo.preset_config("gpt-tiny", tie_word_embeddings=False, pad_token_id=0)
    hfzoo.ZooDecoderModel(copy.deepcopy(config)).save_pretrained(tmp_path / "bare")
    _, loading_info = hfzoo.ZooDecoderForCausalLM.from_pretrained(tmp_path / "bare", output_loading_info=True)
    assert loading_info["missing_keys"] == {"lm_head.weight"}
    hfzoo.ZooDecoderForSequenceClassification(copy.deepcopy(config)).save_pretrained(tmp_path / "classifier")
    with pytest.raises(ValueError, match=r"holds a ZooDecoderForSequenceClassification checkpoint.*\(lm_head\.weight\)"
                       r".*AutoModelForSequenceClassification\.from_pretrained, which picks it"):  # fmt: skip
        transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "classifier")
