"""ELMo's scalar mix of layers as a feature extractor: on the hfzoo biLM, on hfzoo transformers and on native BERT."""

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModel, AutoModelForPreTraining, BertConfig, BertModel

import hfzoo
from hfzoo.adapters import BottleneckConfig
from hfzoo.adapters.scalar_mix import ScalarMix, ScalarMixClassifier

VOCAB = 64


def test_scalar_mix_weights_sum_to_one_and_scale_by_gamma():
    mix = ScalarMix(3)
    with torch.no_grad():
        mix.scalar_weights.copy_(torch.tensor([0.5, -1.0, 2.0]))
        mix.gamma.fill_(2.0)
    weights = mix.weights()
    torch.testing.assert_close(weights.sum(), torch.tensor(1.0))
    layers = [torch.randn(2, 4, 8) for _ in range(3)]
    expected = 2.0 * sum(weight * layer for weight, layer in zip(weights, layers))
    torch.testing.assert_close(mix(layers), expected)
    normed = ScalarMix(3, layer_norm=True)([layer * 100 + 7 for layer in layers])
    torch.testing.assert_close(normed.mean(-1), torch.zeros(2, 4), atol=1e-5, rtol=0)  # an even mix of normed layers


def test_scalar_mix_refuses_another_number_of_layers():
    with pytest.raises(ValueError, match="built for 3 layers but got 2; build it with num_layers=2"):
        ScalarMix(3)([torch.zeros(1, 2, 4)] * 2)


def _task(seed: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Rows of tokens from the lower or the upper half of the vocabulary (the label), right-padded."""
    generator = torch.Generator().manual_seed(seed)
    labels = torch.randint(0, 2, (16,), generator=generator)
    ids = torch.randint(3, VOCAB // 2, (16, 10), generator=generator) + labels[:, None] * (VOCAB // 2 - 3)
    mask = torch.ones_like(ids)
    mask[::3, 7:] = 0
    return ids.masked_fill(mask == 0, 0), mask, labels


def _train(classifier: ScalarMixClassifier, steps: int = 40) -> tuple[float, float]:
    optimizer = torch.optim.AdamW([p for p in classifier.parameters() if p.requires_grad], lr=3e-2)
    ids, mask, labels = _task(seed=0)
    losses = []
    for _ in range(steps):
        loss = classifier(input_ids=ids, attention_mask=mask, labels=labels).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        losses.append(loss.item())
    return losses[0], losses[-1]


def _bert() -> BertModel:
    config = BertConfig(vocab_size=VOCAB, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                        intermediate_size=64)  # fmt: skip
    return BertModel(config)


def _elmo():
    return AutoModelForPreTraining.from_config(hfzoo.preset_config("elmo-tiny", vocab_size=VOCAB))


def _gpt():
    return AutoModel.from_config(hfzoo.preset_config("gpt-tiny", vocab_size=VOCAB))


@pytest.mark.parametrize("build, layers, width", [(_bert, 3, 32), (_elmo, 3, 128), (_gpt, 5, 128)],
                         ids=["native-bert", "hfzoo-elmo", "hfzoo-gpt"])  # fmt: skip
def test_classifier_trains_on_a_frozen_model(build, layers, width):
    torch.manual_seed(0)
    base = build()
    frozen = {name: parameter.clone() for name, parameter in base.state_dict().items()}
    classifier = ScalarMixClassifier(base, num_labels=2, freeze_base=True)
    assert classifier.mix.num_layers == layers and classifier.classifier.in_features == width
    assert not base.training  # frozen: no dropout inside the pretrained model
    trainable = {name for name, parameter in classifier.named_parameters() if parameter.requires_grad}
    assert trainable == {"mix.scalar_weights", "mix.gamma", "classifier.weight", "classifier.bias"}
    first, last = _train(classifier)
    assert last < 0.6 * first, (first, last)
    assert all(torch.equal(frozen[name], value) for name, value in base.state_dict().items())
    assert not torch.equal(classifier.mix.scalar_weights, torch.zeros(layers))  # the mix was learned


def test_unfrozen_base_is_fine_tuned_too():
    torch.manual_seed(0)
    base = _elmo()
    before = base.model.embed_tokens.weight.clone()
    classifier = ScalarMixClassifier(base, num_labels=2, freeze_base=False)
    _train(classifier, steps=2)
    assert not torch.equal(before, base.model.embed_tokens.weight)


def test_elmo_adapters_name_their_targets():
    """The biLSTM has no attention or feed-forward projections: PEFT asks for targets instead of guessing, and
    adapters on the LSTMs work when named."""
    with pytest.raises(ValueError, match="target_modules"):
        get_peft_model(_elmo(), LoraConfig())
    with pytest.raises(ValueError, match="know no default targets for model_type 'hfzoo_bilm'"):
        get_peft_model(_elmo(), BottleneckConfig())
    torch.manual_seed(0)
    model = get_peft_model(_elmo(), BottleneckConfig(target_modules=["forward_lstm", "backward_lstm"]))
    wrapped = [name for name, _ in model.named_modules() if name.endswith(("forward_lstm", "backward_lstm"))]
    assert len(wrapped) == 4
    ids, mask, _ = _task(seed=1)
    loss = model(input_ids=ids, attention_mask=mask, labels=ids.masked_fill(mask == 0, -100)).loss
    loss.backward()
    assert all(p.grad is not None for n, p in model.named_parameters() if p.requires_grad)
