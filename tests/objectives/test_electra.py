"""ELECTRA (issue 18 item 1): the generator + discriminator pair's loss, shared embeddings and replaced-token labels,
the discriminator head's conformance (save/load, remote code without hfzoo, LoRA, fine-tuning heads), the config
checks, and `--objective electra` through the pretrain recipe saving a discriminator the classifier loads."""

import copy
import json
import re

import pytest
import torch
import torch.nn.functional as F
from peft import LoraConfig, get_peft_model
from tests.helpers.encoder_batches import ENCODER_PRESETS, SAME, masked_labels, right_padded_batch
from tests.helpers.recipe_runs import run_pretrain as run_in_process
from tests.helpers.remote_code import load_as_remote_code
from transformers import AutoModel, AutoModelForPreTraining, AutoModelForSequenceClassification

import hfzoo
from hfzoo.commands.pretrain import PretrainConfig, main
from hfzoo.models import ZooEncoderForReplacedTokenDetection
from hfzoo.objectives.electra import ElectraPreTraining
from hfzoo.training.logging import read_log


def electra_pair(preset: str = "bert-tiny", seed: int = 0, **options) -> ElectraPreTraining:
    config = hfzoo.preset_config(preset, hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(seed)
    return ElectraPreTraining(copy.deepcopy(config), **options)


def discriminator(preset: str = "bert-tiny") -> ZooEncoderForReplacedTokenDetection:
    """A tiny discriminator in eval mode, dropout 0."""
    config = hfzoo.preset_config(preset, hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    return ZooEncoderForReplacedTokenDetection(config).eval()


def generator_batch() -> dict[str, torch.Tensor]:
    """A right-padded batch whose labelled positions hold the original tokens, as `electra_collator` makes them."""
    batch = right_padded_batch()
    return {**batch, "labels": masked_labels(batch["input_ids"], batch["attention_mask"])}


# ----------------------------------------------------------------------------------------------- the pair's loss
def test_loss_is_the_generator_loss_plus_lambda_times_the_discriminator_loss():
    pair, batch = electra_pair().eval(), generator_batch()
    masked = batch["labels"] != -100
    with torch.no_grad():
        torch.manual_seed(1)
        output = pair(**batch)
        pair.discriminator_weight = 0.0
        torch.manual_seed(1)
        unweighted = pair(**batch)
    assert output.generator_logits.shape == (int(masked.sum()), pair.config.vocab_size)
    torch.testing.assert_close(output.generator_loss, F.cross_entropy(output.generator_logits, batch["labels"][masked]))
    labelled = output.discriminator_labels != -100
    torch.testing.assert_close(
        output.discriminator_loss,
        F.binary_cross_entropy_with_logits(
            output.discriminator_logits[labelled], output.discriminator_labels[labelled].float()
        ),
    )
    torch.testing.assert_close(output.loss, output.generator_loss + 50.0 * output.discriminator_loss)
    # The loss of guessing the replaced share for every token: the share's binary entropy.
    share = output.discriminator_labels[labelled].float().mean()
    entropy = -(share * share.log() + (1 - share) * (-share).log1p())
    torch.testing.assert_close(output.discriminator_constant_loss, entropy)
    # Zero-weighted, the discriminator adds nothing: the loss is the generator's masked-LM loss.
    torch.testing.assert_close(unweighted.loss, unweighted.generator_loss)
    torch.testing.assert_close(unweighted.generator_loss, output.generator_loss)
    assert output.discriminator_loss > 0.1


def test_embeddings_are_shared_and_stored_once():
    pair = electra_pair()
    embedding = pair.discriminator.get_input_embeddings().weight
    vocabulary_sized = [name for name, p in pair.named_parameters() if p.ndim == 2 and len(p) == pair.config.vocab_size]
    assert vocabulary_sized == ["discriminator.model.embed_tokens.weight"]
    assert pair.generator.encoder.embed_tokens is None  # the generator has no token embedding of its own
    # The generator's masked-LM loss alone trains the shared token, position and segment embeddings, and only them
    # of the discriminator.
    pair.discriminator_weight = 0.0
    pair(**generator_batch()).loss.backward()
    model = pair.discriminator.model
    assert embedding.grad.abs().sum() > 0
    assert model.positions.embeddings.weight.grad.abs().sum() > 0
    assert model.token_type_embeddings.weight.grad.abs().sum() > 0
    assert all(p.grad is None or not p.grad.any() for p in model.layers.parameters())  # zero-weighted
    assert pair.generator.output_bias.grad.abs().sum() > 0


def test_a_sample_equal_to_the_original_token_counts_as_original():
    pair, batch = electra_pair().eval(), generator_batch()
    masked = batch["labels"] != -100
    certain = int(batch["labels"][masked][0])  # the generator will sample this token, and only this one
    with torch.no_grad():
        pair.generator.output_bias[certain] = 1e4
        output = pair(**batch)
    original = torch.where(masked, batch["labels"], batch["input_ids"])
    assert torch.equal(output.discriminator_input_ids[masked], torch.full_like(original[masked], certain))
    assert torch.equal(output.discriminator_input_ids[~masked], original[~masked])
    expected = (masked & (original != certain)).long().masked_fill(batch["attention_mask"] == 0, -100)
    assert torch.equal(output.discriminator_labels, expected)
    assert (output.discriminator_labels[masked] == 0).any() and (output.discriminator_labels[masked] == 1).any()


def test_gradients_reach_both_models_but_not_through_the_sampling():
    pair, batch = electra_pair(), generator_batch()
    output = pair(**batch)
    output.discriminator_loss.backward(retain_graph=True)
    assert all(p.grad is None for p in pair.generator.parameters())  # no gradient through the sampled tokens
    assert pair.discriminator.dense_prediction.weight.grad.abs().sum() > 0
    pair.zero_grad(set_to_none=True)
    output.loss.backward()
    for name in ("generator.encoder.layers.0.mlp.up_proj.weight", "generator.embeddings_project.weight",
                 "discriminator.model.layers.0.mlp.up_proj.weight", "discriminator.dense.weight"):  # fmt: skip
        assert pair.get_parameter(name).grad.abs().sum() > 0, name


def test_narrower_embeddings_are_shared_at_their_own_width():
    """ELECTRA-Small embeds in fewer channels than its hidden size (`embedding_size`): the generator reads those
    shared embeddings, projects them to its width, and scores against the same narrow token embedding."""
    config = hfzoo.preset_config("bert-tiny", embedding_size=16, hidden_dropout=0.0, attention_dropout=0.0)
    torch.manual_seed(0)
    pair = ElectraPreTraining(config)
    assert pair.discriminator.model.embeddings_project.weight.shape == (config.hidden_size, 16)
    assert pair.generator.embeddings_project.weight.shape[1] == 16 and pair.generator.dense.out_features == 16
    assert pair.generator.encoder.config.embedding_size is None  # no second projection in the generator
    output = pair(**generator_batch())
    output.loss.backward()
    assert pair.discriminator.get_input_embeddings().weight.grad.abs().sum() > 0


def test_generator_size_scales_width_heads_and_intermediate_size():
    generator = electra_pair("bert-small", generator_size=1 / 3).generator.encoder.config
    assert (generator.hidden_size, generator.num_attention_heads, generator.intermediate_size) == (128, 2, 512)
    assert generator.num_hidden_layers == 6 and generator.position_embedding == "none"  # positions are shared
    rotary = electra_pair("modernbert-tiny").generator.encoder.config
    assert rotary.position_embedding == "rotary" and rotary.hidden_size == 32


def test_a_low_sampling_temperature_samples_the_generators_best_guess_and_a_high_one_spreads_the_samples():
    """The temperature reaches the sampler: near 0 every masked position gets the generator's argmax; at a high one
    the samples are spread nearly uniformly over the vocabulary, so they vary from draw to draw where the cold
    ones do not."""
    batch = generator_batch()
    masked = batch["labels"] != -100
    draws = {}
    for temperature in (1e-4, 1e4):
        pair = electra_pair(sampling_temperature=temperature).eval()
        with torch.no_grad():
            outputs = [pair(**batch) for _ in range(2)]
        draws[temperature] = [output.discriminator_input_ids[masked] for output in outputs]
        if temperature < 1:
            assert torch.equal(draws[temperature][0], outputs[0].generator_logits.argmax(-1))
    assert torch.equal(*draws[1e-4]) and not torch.equal(*draws[1e4])


def test_unknown_keyword_arguments_are_refused():
    pair = electra_pair()
    with pytest.raises(TypeError, match="next_sentence_label"):
        pair(**generator_batch(), next_sentence_label=torch.tensor([0, 1, 1]))
    with pytest.raises(TypeError, match="'sentence_label'"):
        pair.discriminator(**right_padded_batch(), sentence_label=torch.tensor([0, 1, 1]))


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"objective_options": {"generator_size": 1.5}}, r"'objective_options': generator_size .* in \(0, 1\]"),
        ({"objective_options": {"generator_size": 0.4}}, r"'objective_options': generator_size=0.4 .* 51 .* 2 "),
        ({"objective_options": {"discriminator_weight": -1}}, r"'objective_options': discriminator_weight"),
        ({"objective_options": {"sampling_temperature": 0}}, r"'objective_options': sampling_temperature .* > 0"),
        ({"objective_options": {"size": 0.25}}, r"'objective_options': objective 'electra' has no option 'size'"),
        ({"objective": "mlm", "objective_options": {"generator_size": 0.25}}, r"'mlm' has no option 'generator_size'"),
        ({"collator": {"random_replace_prob": 0.1}}, r"'collator': objective 'electra' trains with random_replace"),
    ],
)
def test_config_errors_name_the_key(settings, message):
    config = PretrainConfig(**{"preset": "bert-tiny", "objective": "electra", **settings})
    with pytest.raises(ValueError, match=message):
        config.check()


# ----------------------------------------------------------------------------------------- the discriminator head
def detection_labels(batch: dict[str, torch.Tensor]) -> torch.Tensor:
    replaced = masked_labels(batch["input_ids"], batch["attention_mask"], seed=3) != -100
    return replaced.long().masked_fill(batch["attention_mask"] == 0, -100)


@pytest.mark.parametrize("preset", ENCODER_PRESETS)
def test_discriminator_round_trips_and_names_itself_in_the_auto_map(preset, tmp_path):
    model = discriminator(preset)
    model.save_pretrained(tmp_path)
    weights = sorted(path.name for path in tmp_path.iterdir() if path.suffix in (".safetensors", ".bin", ".pt"))
    assert weights == ["model.safetensors"]
    auto_map = json.loads((tmp_path / "config.json").read_text())["auto_map"]
    module = "modeling_encoder_components" if model.config.position_embedding == "disentangled" else "modeling_encoder"
    assert auto_map["AutoModelForPreTraining"] == f"{module}.ZooEncoderForReplacedTokenDetection"
    loaded = ZooEncoderForReplacedTokenDetection.from_pretrained(tmp_path).eval()
    batch = right_padded_batch()
    labels = detection_labels(batch)
    with torch.no_grad():
        expected, output = model(**batch, labels=labels), loaded(**batch, labels=labels)
    assert output.logits.shape == batch["input_ids"].shape
    torch.testing.assert_close(output.logits, expected.logits, **SAME)
    labelled = labels != -100
    bce = F.binary_cross_entropy_with_logits(expected.logits[labelled], labels[labelled].float())
    torch.testing.assert_close(expected.loss, bce)
    # With hfzoo too, AutoModelForPreTraining picks the discriminator the checkpoint names, every weight loaded.
    auto, loading_info = AutoModelForPreTraining.from_pretrained(tmp_path, output_loading_info=True)
    assert type(auto) is ZooEncoderForReplacedTokenDetection
    assert not loading_info["missing_keys"] and not loading_info["unexpected_keys"]


def test_discriminator_checkpoint_carries_its_encoder_into_the_bare_model_and_the_classifier(tmp_path):
    pretrained = discriminator()
    pretrained.save_pretrained(tmp_path)
    bare = AutoModel.from_pretrained(tmp_path)
    classifier, info = AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    for model in (bare, classifier.model):
        assert torch.equal(model.layers[0].mlp.up_proj.weight, pretrained.model.layers[0].mlp.up_proj.weight)
    assert all(not key.startswith("model.layers") for key in info["missing_keys"]), info["missing_keys"]


def test_lora_needs_no_target_modules_and_merges_exactly():
    model = discriminator()
    peft_model = get_peft_model(model, LoraConfig(r=4, init_lora_weights=False))
    batch = right_padded_batch()
    with torch.no_grad():
        adapted = peft_model(**batch).logits
        merged = peft_model.merge_and_unload()(**batch).logits
    torch.testing.assert_close(merged, adapted, atol=1e-5, rtol=0)


def test_remote_code_loads_where_hfzoo_is_not_importable(tmp_path, hfzoo_free_python):
    model = discriminator()
    model.save_pretrained(tmp_path / "model")
    batch = right_padded_batch()
    # The checkpoint's auto_map names the discriminator under AutoModelForPreTraining: [batch, seq] logits come back.
    jobs = {"rtd": ("AutoModelForPreTraining", str(tmp_path / "model"), batch)}
    results = load_as_remote_code(hfzoo_free_python, jobs, tmp_path)
    with torch.no_grad():
        expected = model(**batch).logits
    assert results["rtd"].shape == batch["input_ids"].shape
    torch.testing.assert_close(results["rtd"], expected, **SAME)


# ----------------------------------------------------------------------------------------------- the recipe
def test_help_lists_electra(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    help_text = capsys.readouterr().out
    assert "electra" in help_text and "--objective_options" in help_text


def test_the_recipe_trains_electra_and_saves_a_discriminator_the_classifier_loads(tmp_path):
    output_dir = run_in_process(
        "--preset", "bert-tiny", "--objective", "electra", "--tokenizer_kind", "wordpiece", "--max_train_samples",
        "40", "--gradient_accumulation_steps", "1", "--max_steps", "4", "--eval_every", "4", "--save_every", "100",
        "--objective_options.generator_size", "0.5", "--output_dir", str(tmp_path / "electra"),
    )  # fmt: skip
    records = read_log(output_dir)
    assert [r["step"] for r in records if r["event"] == "train"] == [1, 2, 3, 4]
    evaluation = [r for r in records if r["event"] == "eval"][-1]
    assert evaluation["eval_loss"] == pytest.approx(
        evaluation["eval_generator_loss"] + 50 * evaluation["eval_discriminator_loss"]
    )
    assert evaluation["perplexity"] == pytest.approx(torch.tensor(evaluation["eval_generator_loss"]).exp().item())
    assert 0 < evaluation["eval_discriminator_constant_loss"] <= 0.7  # a share's entropy, at most log 2
    saved = json.loads((output_dir / "config.json").read_text())
    assert saved["architectures"] == ["ZooEncoderForReplacedTokenDetection"] and saved["hidden_size"] == 128
    # The Auto class the card names gives back the discriminator, every weight loaded.
    card_class = re.search(r"model = (\w+)\.from_pretrained\(path\)", (output_dir / "README.md").read_text())[1]
    assert card_class == "AutoModelForPreTraining"
    discriminator, loading_info = AutoModelForPreTraining.from_pretrained(output_dir, output_loading_info=True)
    assert type(discriminator) is ZooEncoderForReplacedTokenDetection
    assert not loading_info["missing_keys"] and not loading_info["unexpected_keys"]
    classifier = AutoModelForSequenceClassification.from_pretrained(output_dir, num_labels=2)
    assert torch.equal(classifier.model.layers[3].mlp.up_proj.weight, discriminator.model.layers[3].mlp.up_proj.weight)
    assert torch.equal(classifier.model.embed_tokens.weight, discriminator.model.embed_tokens.weight)
