"""`--optimizer muon`: Muon on the hidden matrices, AdamW on the rest, as one optimizer whose state saves and loads
in torch's format (hfzoo's checkpoints need nothing else)."""

import copy

import torch
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.training.loop import build_optimizer
from hfzoo.training.muon import MuonWithAdamW


def _model(seed: int = 0):
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(hfzoo.preset_config(
        "gpt-tiny", vocab_size=64, tie_word_embeddings=False, hidden_dropout=0.0, attention_dropout=0.0))


def _train(model, optimizer, steps: int) -> None:
    batch = torch.randint(0, 64, (2, 9), generator=torch.Generator().manual_seed(1))
    for _ in range(steps):
        model(batch, labels=batch).loss.backward()
        optimizer.step()
        optimizer.zero_grad()


def test_hidden_matrices_go_to_muon_and_embeddings_head_norms_biases_to_adamw():
    model = _model()
    optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8, optimizer="muon", muon_learning_rate=0.02)
    assert isinstance(optimizer, MuonWithAdamW)
    names = {id(p): name for name, p in model.named_parameters()}
    muon = {names[id(p)] for group in optimizer.muon.param_groups for p in group["params"]}
    adamw = {names[id(p)] for group in optimizer.adamw.param_groups for p in group["params"]}
    assert muon == {name for name in names.values() if name.endswith(("qkv_proj.weight", "o_proj.weight",
                                                                        "up_proj.weight", "down_proj.weight"))}
    assert {"model.embed_tokens.weight", "model.positions.embeddings.weight", "lm_head.weight"} <= adamw
    assert muon.isdisjoint(adamw) and muon | adamw == set(names.values())
    assert [g["lr"] for g in optimizer.param_groups] == [0.02, 1e-3, 1e-3]
    assert optimizer.param_groups[0] is optimizer.muon.param_groups[0]  # a scheduler's lr reaches Muon


def test_its_state_dict_holds_both_and_a_reload_continues_exactly():
    model = _model()
    optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8, optimizer="muon")
    _train(model, optimizer, 3)
    state = copy.deepcopy(optimizer.state_dict())  # a checkpoint holds copies, not the live moments
    kinds = {name for values in state["state"].values() for name in values}
    assert kinds == {"momentum_buffer", "step", "exp_avg", "exp_avg_sq"}
    other = _model(seed=5)
    other.load_state_dict(model.state_dict())
    reloaded = build_optimizer(other, 1e-3, 0.1, (0.9, 0.95), 1e-8, optimizer="muon")
    reloaded.load_state_dict(state)
    assert reloaded.muon.state is reloaded.state and reloaded.muon.param_groups[0] is reloaded.param_groups[0]
    _train(model, optimizer, 2)
    _train(other, reloaded, 2)
    for (name, expected), actual in zip(model.state_dict().items(), other.state_dict().values()):
        assert torch.equal(expected, actual), name
