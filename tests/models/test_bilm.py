"""ELMo's biLM family: config checks, what each direction may see, the loss, padding, save/load and remote code."""

import json
import textwrap

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file, save_file
from transformers import AutoConfig, AutoModel, AutoModelForPreTraining

import hfzoo
from hfzoo.models import ZooBiLMConfig, ZooBiLMForPreTraining, ZooBiLMModel

VOCAB = 97


def build_elmo(auto_class=AutoModelForPreTraining, seed: int = 0, **overrides):
    torch.manual_seed(seed)
    config = hfzoo.preset_config("elmo-tiny", vocab_size=VOCAB, hidden_dropout=0.0, **overrides)
    return auto_class.from_config(config).eval()


def token_ids(batch: int = 2, length: int = 9, seed: int = 1) -> torch.Tensor:
    return torch.randint(3, VOCAB, (batch, length), generator=torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------------------------- config
@pytest.mark.parametrize(
    "overrides, error, message",
    [
        ({"cell_size": 32}, ValueError, r"cell_size \(32\) must be >= hidden_size \(64\)"),
        ({"num_hidden_layers": 0}, ValueError, "num_hidden_layers must be a positive integer, got 0"),
        ({"hidden_dropout": 1.0}, ValueError, r"hidden_dropout must be in \[0, 1\), got 1.0"),
        ({"hidden_size": "64"}, TypeError, r"hidden_size must be int, got '64' \(str\)"),
        ({"residual_connections": 1}, TypeError, r"residual_connections must be bool \(true or false\), got 1"),
    ],
)
def test_config_errors_name_the_field(overrides, error, message):
    with pytest.raises(error, match=message):
        hfzoo.preset_config("elmo-tiny", **overrides)


def test_a_bad_value_in_a_saved_config_names_the_file(tmp_path):
    build_elmo().save_pretrained(tmp_path)
    config = json.loads((tmp_path / "config.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps({**config, "cell_size": 8}))
    with pytest.raises(ValueError, match=rf"{tmp_path / 'config.json'}: cell_size \(8\)"):
        AutoModelForPreTraining.from_pretrained(tmp_path)


def test_cell_as_wide_as_the_output_means_no_projection():
    model = build_elmo(cell_size=64)
    assert model.model.layers[0].forward_lstm.proj_size == 0
    assert build_elmo().model.layers[0].forward_lstm.proj_size == 64


def test_auto_classes_and_presets():
    config = hfzoo.preset_config("elmo-small")
    assert isinstance(config, ZooBiLMConfig) and AutoConfig.for_model("hfzoo_bilm").model_type == "hfzoo_bilm"
    assert type(AutoModel.from_config(hfzoo.preset_config("elmo-tiny"))) is ZooBiLMModel
    assert {"elmo-tiny", "elmo-small"} <= set(hfzoo.list_presets())
    model = build_elmo()
    assert type(model) is ZooBiLMForPreTraining
    assert model.lm_head.weight is model.model.embed_tokens.weight  # the tied softmax


# ----------------------------------------------------------------------------------------------- what it sees
@torch.no_grad()
def test_neither_direction_sees_the_token_it_predicts():
    model = build_elmo()
    ids = token_ids(batch=1, length=10)
    changed = ids.clone()
    k = 5
    changed[0, k] = (ids[0, k] + 1) % VOCAB
    before, after = model(input_ids=ids), model(input_ids=changed)
    # The forward LM at t predicts t + 1 from tokens <= t: positions before k never read token k.
    assert torch.equal(before.forward_logits[:, :k], after.forward_logits[:, :k])
    assert not torch.allclose(before.forward_logits[:, k:], after.forward_logits[:, k:])
    # The backward LM at t predicts t - 1 from tokens >= t: positions after k never read token k.
    assert torch.equal(before.backward_logits[:, k + 1 :], after.backward_logits[:, k + 1 :])
    assert not torch.allclose(before.backward_logits[:, : k + 1], after.backward_logits[:, : k + 1])


@torch.no_grad()
def test_padding_on_either_side_changes_nothing():
    model = build_elmo()
    ids = token_ids(batch=1, length=6)
    alone = model(input_ids=ids)
    pad = torch.zeros(1, 3, dtype=torch.long)
    for padded, mask, real in (
        (torch.cat([ids, pad], 1), torch.tensor([[1] * 6 + [0] * 3]), slice(0, 6)),
        (torch.cat([pad, ids], 1), torch.tensor([[0] * 3 + [1] * 6]), slice(3, 9)),
    ):
        out = model(input_ids=padded, attention_mask=mask, output_hidden_states=True)
        for name in ("forward_logits", "backward_logits"):
            torch.testing.assert_close(out[name][:, real], alone[name], rtol=0, atol=1e-6)
        assert all(not layer[mask == 0].any() for layer in out.hidden_states)  # pad positions are zeros


@torch.no_grad()
def test_bare_model_returns_every_layer_both_directions():
    lm, bare = build_elmo(), build_elmo(AutoModel)
    ids = token_ids()
    hidden_states = bare(input_ids=ids).hidden_states
    assert len(hidden_states) == 1 + lm.config.num_hidden_layers
    assert all(layer.shape == (2, 9, 2 * lm.config.hidden_size) for layer in hidden_states)
    embeddings = bare.embed_tokens(ids)
    assert torch.equal(hidden_states[0], torch.cat([embeddings, embeddings], -1))  # ELMo's token layer
    # The top layer's forward half feeds the LM head's forward softmax.
    forward_top = hidden_states[-1][..., : lm.config.hidden_size]
    assert torch.equal(lm(input_ids=ids).forward_logits, F.linear(forward_top, lm.lm_head.weight))


def test_loss_is_the_mean_of_both_directions():
    model = build_elmo()
    ids = token_ids()
    labels = ids.clone()
    labels[1, -2:] = -100
    mask = (labels != -100).long()
    out = model(input_ids=ids, attention_mask=mask, labels=labels)
    forward = F.cross_entropy(out.forward_logits[:, :-1][mask[:, :-1] == 1].flatten(0, -2),
                              labels[:, 1:][mask[:, :-1] == 1], ignore_index=-100)  # fmt: skip
    backward = F.cross_entropy(out.backward_logits[:, 1:][mask[:, 1:] == 1].flatten(0, -2),
                               labels[:, :-1][mask[:, 1:] == 1], ignore_index=-100)  # fmt: skip
    torch.testing.assert_close(out.loss, (forward + backward) / 2)


def test_unknown_argument_is_refused():
    with pytest.raises(TypeError, match="next_sentence_label"):
        build_elmo()(input_ids=token_ids(), next_sentence_label=torch.tensor([0, 1]))


# ----------------------------------------------------------------------------------------------- save and load
@torch.no_grad()
def test_save_and_load_give_identical_logits(tmp_path):
    model = build_elmo()
    model.save_pretrained(tmp_path)
    assert "lm_head.weight" not in load_file(tmp_path / "model.safetensors")  # tied: saved once
    assert {"configuration_bilm.py", "modeling_bilm.py"} <= {path.name for path in tmp_path.iterdir()}
    loaded = AutoModelForPreTraining.from_pretrained(tmp_path).eval()
    assert loaded.lm_head.weight is loaded.model.embed_tokens.weight
    ids = token_ids()
    expected, actual = model(input_ids=ids), loaded(input_ids=ids)
    assert torch.equal(expected.forward_logits, actual.forward_logits)
    assert torch.equal(expected.backward_logits, actual.backward_logits)
    bare = AutoModel.from_pretrained(tmp_path).eval()  # the LM checkpoint gives the feature extractor too
    assert torch.equal(bare(input_ids=ids).last_hidden_state[..., :64], model.model(input_ids=ids).last_hidden_state[..., :64])


CHILD = textwrap.dedent(
    """
    import sys
    from pathlib import Path

    import torch
    from safetensors.torch import load_file, save_file

    checkpoint, results = Path(sys.argv[1]), Path(sys.argv[2])
    from transformers import AutoModel, AutoModelForPreTraining

    inputs = load_file(results / "inputs.safetensors")
    lm = AutoModelForPreTraining.from_pretrained(checkpoint, trust_remote_code=True).eval()
    bare = AutoModel.from_pretrained(checkpoint, trust_remote_code=True).eval()
    assert type(lm).__module__.startswith("transformers_modules."), type(lm).__module__
    with torch.no_grad():
        out = lm(**inputs)
        top = bare(**inputs).last_hidden_state
    save_file({"forward": out.forward_logits, "backward": out.backward_logits, "top": top}, results / "remote.safetensors")
    """
)


def test_remote_code_without_hfzoo(tmp_path, hfzoo_free_python):
    checkpoint = tmp_path / "elmo"
    build_elmo().save_pretrained(checkpoint)
    inputs = {"input_ids": token_ids(), "attention_mask": torch.tensor([[1] * 9, [1] * 6 + [0] * 3])}
    save_file(inputs, tmp_path / "inputs.safetensors")
    child = hfzoo_free_python.run(CHILD, tmp_path, str(checkpoint), str(tmp_path))
    assert child.returncode == 0, child.stderr[-4000:]
    remote = load_file(tmp_path / "remote.safetensors")
    loaded = AutoModelForPreTraining.from_pretrained(checkpoint).eval()  # loaded vs loaded: same memory alignment
    with torch.no_grad():
        out = loaded(**inputs)
        top = AutoModel.from_pretrained(checkpoint).eval()(**inputs).last_hidden_state
    assert torch.equal(remote["forward"], out.forward_logits) and torch.equal(remote["backward"], out.backward_logits)
    assert torch.equal(remote["top"], top)


def test_activation_checkpointing_gives_the_same_gradients():
    ids = token_ids()
    gradients = []
    for checkpointing in (False, True):
        model = build_elmo().train()
        if checkpointing:
            model.activation_checkpointing_enable()
            assert all(layer.gradient_checkpointing for layer in model.model.layers)
        model(input_ids=ids, labels=ids).loss.backward()
        gradients.append({name: p.grad for name, p in model.named_parameters()})
    assert gradients[0].keys() == gradients[1].keys()
    for name, gradient in gradients[0].items():
        torch.testing.assert_close(gradients[1][name], gradient, rtol=1e-5, atol=1e-7, msg=name)
