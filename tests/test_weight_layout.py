"""The CPU-speed choices of `hfzoo.models.layers`: weight layouts and the few-rows vocabulary projection.

Both change how a product is computed, never what it is: these tests pin the values, the layouts, and the cases
that must fall back to the module's own call.
"""

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from hfzoo.models.layers import FEW_ROWS, arrange_weights, project_rows


def test_widening_projections_are_input_major_after_init_and_after_loading(tiny_model, tmp_path):
    model = tiny_model("llama-tiny")  # hidden 128: gate_up (704) and qkv (256) widen at least 2x, o and down do not
    model.save_pretrained(tmp_path)
    for candidate in (model, AutoModelForCausalLM.from_pretrained(tmp_path)):
        gate_up = candidate.model.layers[0].mlp.up_proj.weight
        assert gate_up.shape == (704, 128) and gate_up.stride() == (1, 704)
        assert candidate.model.layers[0].self_attn.qkv_proj.weight.stride() == (1, 256)
        assert candidate.model.layers[0].self_attn.o_proj.weight.is_contiguous()
        assert candidate.model.layers[0].mlp.down_proj.weight.is_contiguous()
        assert candidate.lm_head.weight.is_contiguous()  # the untied head stays row-major (training cost)
        assert all(parameter.data_ptr() % 64 == 0 for parameter in candidate.parameters())


def test_arranging_keeps_values_and_parameter_identity():
    linear = nn.Linear(8, 32)
    parameter, values = linear.weight, linear.weight.detach().clone()
    arrange_weights(linear)
    assert linear.weight is parameter and torch.equal(linear.weight, values) and linear.weight.stride() == (1, 32)


def test_few_rows_projection_equals_the_module_and_falls_back_where_it_must():
    torch.manual_seed(0)
    head = nn.Linear(64, 1000)
    for rows in (1, 2, 8, 32, 33):
        states = torch.randn(rows, 1, 64)
        with torch.no_grad():
            torch.testing.assert_close(project_rows(head, states), head(states), rtol=1e-5, atol=1e-5)
            assert project_rows(head, states).is_contiguous()
    states = torch.randn(4, 64, requires_grad=True)
    assert project_rows(head, states).grad_fn.name() == head(states).grad_fn.name()  # training: the module's call

    calls = []
    head.register_forward_hook(lambda module, args, output: calls.append(len(output)))
    with torch.no_grad():
        project_rows(head, torch.randn(4, 64))
    assert calls == [4], "a hooked head (accelerate offloading, output recording) must run its own forward"
    assert 2 in FEW_ROWS and 32 in FEW_ROWS and 1 not in FEW_ROWS
