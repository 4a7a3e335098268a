"""`--optimizer muon`: Muon on the hidden matrices, AdamW on the rest, as one optimizer whose state saves and loads
in torch's format (hfzoo's checkpoints need nothing else)."""

import copy

import pytest
import torch
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.training.loop import build_optimizer, build_scheduler
from hfzoo.training.muon import Muon, MuonWithAdamW, newton_schulz


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


def test_the_newton_schulz_iterations_are_torchs_and_run_in_float32_on_the_cpu():
    """In bfloat16 hfzoo's iterations are torch's bit for bit; its Muon runs them in float32 on the CPU (torch's
    bfloat16 took 1 s per step of gpt-tiny on a CPU without bfloat16 units), which lands within float32 rounding of
    float64 iterations where torch's bfloat16 lands percent away."""
    coefficients = (3.4445, -4.775, 2.0315)
    for shape in ((96, 32), (32, 96)):  # tall matrices are transposed, as torch does
        update = torch.randn(shape, generator=torch.Generator().manual_seed(2))
        torchs = torch.optim._muon._zeropower_via_newtonschulz(update, coefficients, 5, 1e-7)
        assert torch.equal(newton_schulz(update, coefficients, 5, 1e-7, torch.bfloat16), torchs.float())

    def stepped(optimizer_class, **attributes) -> torch.Tensor:
        weight = torch.nn.Parameter(torch.randn(48, 16, generator=torch.Generator().manual_seed(3)))
        weight.grad = torch.randn(48, 16, generator=torch.Generator().manual_seed(4))
        optimizer = optimizer_class([weight], lr=0.02)
        for name, value in attributes.items():
            setattr(optimizer, name, value)
        optimizer.step()
        return weight.detach()

    exact = stepped(Muon, cpu_dtype=torch.float64)
    assert (stepped(Muon) - exact).abs().max() < 1e-6
    assert (stepped(torch.optim.Muon) - exact).abs().max() > 1e-4


def test_embedding_learning_rate_gives_the_token_table_a_group_of_its_own_under_adamw_and_muon():
    """`--embedding_learning_rate` (the speedrun's faster embeddings): the token table alone, at its own peak that
    the schedule scales like the rest; position embeddings, head and hidden matrices keep theirs."""
    model = _model()
    for kind in ("adamw", "muon"):
        optimizer = build_optimizer(model, 1e-3, 0.1, (0.9, 0.95), 1e-8, optimizer=kind, embedding_learning_rate=1e-2)
        adamw = optimizer.adamw if kind == "muon" else optimizer
        fast = [group for group in adamw.param_groups if group["lr"] == 1e-2]
        assert len(fast) == 1 and fast[0]["params"] == [model.model.embed_tokens.weight]
        assert fast[0]["weight_decay"] == 0.1
        rest = {id(p) for group in optimizer.param_groups if group is not fast[0] for p in group["params"]}
        assert len(rest) + 1 == len(list(model.parameters())) and id(model.lm_head.weight) in rest
        scheduler = build_scheduler(optimizer, warmup_steps=4, max_steps=8, min_lr_ratio=0.1)
        for _ in range(2):  # half way up the warmup
            optimizer.step()
            scheduler.step()
        assert fast[0]["lr"] == pytest.approx(5e-3)
        halved = [group["initial_lr"] / 2 for group in optimizer.param_groups]
        assert [group["lr"] for group in optimizer.param_groups] == pytest.approx(halved)
    tied = AutoModelForCausalLM.from_config(hfzoo.preset_config("gpt-tiny", vocab_size=64))
    optimizer = build_optimizer(tied, 1e-3, 0.1, (0.9, 0.95), 1e-8, embedding_learning_rate=1e-2)
    assert optimizer.param_groups[0]["params"] == [tied.lm_head.weight]  # a tied head is the table
    with pytest.raises(ValueError, match="'embedding_learning_rate' needs a token embedding table, and this Linear"):
        build_optimizer(torch.nn.Linear(2, 2), 1e-3, 0.1, (0.9, 0.95), 1e-8, embedding_learning_rate=1e-2)
