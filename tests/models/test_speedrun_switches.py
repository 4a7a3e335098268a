"""The modded-nanoGPT speedrun's model switches (issue 36): each changes the forward the way its paper says, and
each is off by default, so no preset's math changes but the speedrun presets', which exist to turn on what paid."""

import pytest
import torch
from transformers import AutoModel
from transformers.activations import ACT2FN

import hfzoo

INPUT_IDS = torch.randint(0, 64, (2, 7), generator=torch.Generator().manual_seed(0))


def test_every_switch_is_off_in_every_preset_but_the_speedrun_presets():
    speedrun = [preset for preset in hfzoo.list_presets() if preset.startswith("gpt-speedrun-")]
    assert speedrun and all(hfzoo.preset_config(preset).activation == "relu2" for preset in speedrun)
    for preset in sorted(set(hfzoo.list_presets()) - set(speedrun)):
        config = hfzoo.preset_config(preset)
        switches = [getattr(config, name, None) for name in ("qk_norm", "logit_softcap", "zero_init_projections")]
        assert switches in ([False, None, False], [None, None, None]), preset  # ELMo's config has none
        assert getattr(config, "activation", None) != "relu2", preset


@pytest.mark.parametrize("position_embedding", ["rotary", "learned"])
def test_qk_norm_normalises_each_query_and_key_head_before_the_scores(tiny_model, position_embedding):
    model = tiny_model("llama-tiny", vocab_size=64, qk_norm=True, position_embedding=position_embedding)
    attention = model.model.layers[0].self_attn
    seen = {}
    attention.q_norm.register_forward_hook(lambda module, args, output: seen.setdefault("query", output))
    attention.k_norm.register_forward_hook(lambda module, args, output: seen.setdefault("key", output))
    loss = model(INPUT_IDS, labels=INPUT_IDS).loss
    loss.backward()
    for states in seen.values():  # unit RMS per head (the norm's weight starts at 1)
        torch.testing.assert_close(states.pow(2).mean(-1), torch.ones(states.shape[:-1]), rtol=1e-4, atol=1e-4)
    assert attention.q_norm.weight.grad is not None and attention.k_norm.weight.grad is not None


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_relu2_squares_the_relu_as_transformers_relu2_does_bit_for_bit_gradients_too(tiny_model, dtype):
    """hfzoo's ReLU² runs fewer element-wise passes than transformers' `relu2` (its own backward): the same values."""
    model = tiny_model("gpt-tiny", vocab_size=64, activation="relu2")
    act_fn = model.model.layers[0].mlp.act_fn
    states = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(0)).to(dtype)
    upstream = torch.randn(3, 5, 64, generator=torch.Generator().manual_seed(1)).to(dtype)
    gradients = []
    for activation in (act_fn, ACT2FN["relu2"]):
        given = states.clone().requires_grad_()
        squared = activation(given)
        gradients.append(torch.autograd.grad(squared, given, upstream)[0])
        assert torch.equal(squared, torch.relu(states) ** 2)
    assert torch.equal(*gradients) and torch.equal(gradients[0], 2 * torch.relu(states) * upstream)
    with torch.no_grad():
        assert torch.equal(act_fn(states), torch.relu(states) ** 2) and states.min() < 0  # input left as it was
    assert torch.isfinite(model(INPUT_IDS, labels=INPUT_IDS).loss)


def test_logit_softcap_bounds_the_logits_the_loss_sees(tiny_model):
    plain = tiny_model("gpt-tiny", vocab_size=64)
    capped = tiny_model("gpt-tiny", vocab_size=64, logit_softcap=0.5)
    capped.load_state_dict(plain.state_dict())
    with torch.no_grad():
        logits, out = plain(INPUT_IDS).logits, capped(INPUT_IDS, labels=INPUT_IDS)
    torch.testing.assert_close(out.logits, 0.5 * torch.tanh(logits / 0.5))
    expected = torch.nn.functional.cross_entropy(out.logits[:, :-1].flatten(0, 1), INPUT_IDS[:, 1:].flatten())
    torch.testing.assert_close(out.loss, expected)


@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-moe-tiny", "t5-tiny"])
def test_zero_init_projections_start_every_block_as_the_identity(tiny_model, preset):
    model = tiny_model(preset, AutoModel, vocab_size=64, zero_init_projections=True)
    zeroed = {name: p for name, p in model.named_parameters() if name.endswith(("o_proj.weight", "down_proj.weight"))}
    assert zeroed and all(not p.any() for p in zeroed.values())
    others = [p for name, p in model.named_parameters() if name.endswith("proj.weight") and name not in zeroed]
    assert others and all(p.any() for p in others)
