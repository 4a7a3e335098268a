"""Mixture-of-experts decoder (`llama-moe-tiny`): router outputs, the load-balancing loss, and sparse dispatch."""

import pytest
import torch
import torch.nn.functional as F
from transformers import (
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
)

from hfzoo.models.mixture_of_experts import MixtureOfExperts

PRESET = "llama-moe-tiny"
INPUT_IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11], [40, 41, 42, 43, 44, 45, 46]])


@pytest.fixture
def moe_model(tiny_model):
    return tiny_model(PRESET, pad_token_id=0)


def test_outputs_carry_router_logits_and_the_auxiliary_loss_inside_loss(moe_model):
    config = moe_model.config
    with torch.no_grad():
        outputs = moe_model(INPUT_IDS, labels=INPUT_IDS)
    assert len(outputs.router_logits) == config.num_hidden_layers
    assert all(logits.shape == (INPUT_IDS.numel(), config.num_experts) for logits in outputs.router_logits)
    assert outputs.aux_loss.ndim == 0 and outputs.aux_loss >= 1.0 - 1e-6
    vocab = outputs.logits.shape[-1]
    cross_entropy = F.cross_entropy(outputs.logits[:, :-1].reshape(-1, vocab), INPUT_IDS[:, 1:].reshape(-1))
    torch.testing.assert_close(outputs.loss, cross_entropy + config.router_aux_loss_coef * outputs.aux_loss)


# The task heads transformers' generic ones would give (their forward drops the load-balancing loss) and their targets.
TASK_TARGETS = {
    AutoModelForSequenceClassification: dict(labels=torch.tensor([0, 1])),
    AutoModelForTokenClassification: dict(labels=INPUT_IDS % 2),
    AutoModelForQuestionAnswering: dict(start_positions=torch.tensor([1, 2]), end_positions=torch.tensor([3, 5])),
}


@pytest.mark.parametrize("auto_class", TASK_TARGETS, ids=lambda auto_class: auto_class.__name__)
def test_task_heads_add_the_load_balancing_loss_to_the_task_loss(auto_class, tiny_model):
    model = tiny_model(PRESET, auto_class, pad_token_id=0).eval()
    config, targets = model.config, TASK_TARGETS[auto_class]
    with torch.no_grad():
        router_logits = model.model(INPUT_IDS, output_router_logits=True).router_logits
        loss = model(INPUT_IDS, **targets).loss
        coef, config.router_aux_loss_coef = config.router_aux_loss_coef, 0.0
        task_loss = model(INPUT_IDS, **targets).loss
    aux_loss = MixtureOfExperts.load_balancing_loss(router_logits, config.num_experts, config.num_experts_per_tok)
    assert coef > 0 and aux_loss >= 1.0 - 1e-6
    torch.testing.assert_close(loss, task_loss + coef * aux_loss)


def test_load_balancing_loss_is_one_for_a_uniform_router_and_larger_when_collapsed(moe_model):
    for layer in moe_model.model.layers:
        torch.nn.init.zeros_(layer.mlp.router.weight)
    with torch.no_grad():
        outputs = moe_model(INPUT_IDS)
    torch.testing.assert_close(outputs.aux_loss, torch.tensor(1.0))

    experts, top_k, tokens = 4, 2, 32
    uniform = torch.zeros(tokens, experts)
    skewed = torch.tensor([[2.0, 1.0, 0.0, 0.0]]).repeat(tokens, 1)
    collapsed = torch.tensor([[20.0, 0.0, 0.0, 0.0]]).repeat(tokens, 1)
    balanced = torch.eye(experts).repeat(tokens // experts, 1) * 20  # each token sure of its own, evenly spread
    routers = (uniform, balanced, skewed, collapsed)
    losses = [MixtureOfExperts.load_balancing_loss((logits,), experts, top_k) for logits in routers]
    torch.testing.assert_close(losses[0], torch.tensor(1.0))
    assert losses[1] < losses[2] < losses[3]
    # All tokens send half their slots to expert 0, which holds (almost) all the probability: 4 * 0.5 * 1.
    torch.testing.assert_close(losses[3], torch.tensor(2.0), atol=1e-6, rtol=0)


def test_each_expert_sees_only_the_tokens_routed_to_it(moe_model):
    config = moe_model.config
    layer = moe_model.model.layers[0].mlp
    assert isinstance(layer, MixtureOfExperts)
    seen = {}
    layer.register_forward_pre_hook(lambda module, args: seen.__setitem__("input", args[0]))
    for index, expert in enumerate(layer.experts):
        expert.register_forward_pre_hook(lambda module, args, index=index: seen.__setitem__(index, args[0]))
    with torch.no_grad():
        outputs = moe_model(INPUT_IDS)
    tokens = seen["input"].reshape(-1, config.hidden_size)
    chosen = outputs.router_logits[0].topk(config.num_experts_per_tok, dim=-1).indices
    total_rows = 0
    for index in range(config.num_experts):
        routed = (chosen == index).any(dim=-1)
        if not routed.any():
            assert index not in seen, f"expert {index} ran without tokens"
            continue
        # Exactly the routed tokens, in token order, and nothing else.
        assert torch.equal(seen[index], tokens[routed]), f"expert {index}"
        total_rows += seen[index].shape[0]
    assert total_rows == INPUT_IDS.numel() * config.num_experts_per_tok


def test_greedy_generate_with_cache_equals_without(moe_model):
    prompts = torch.tensor([[0, 0, 5, 6, 7], [9, 10, 11, 12, 13]])
    kwargs = dict(attention_mask=(prompts != 0).long(), max_new_tokens=8, min_new_tokens=8, do_sample=False)
    cached = moe_model.generate(prompts, use_cache=True, **kwargs)
    assert torch.equal(cached, moe_model.generate(prompts, use_cache=False, **kwargs))
