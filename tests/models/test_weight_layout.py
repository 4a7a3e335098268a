"""The CPU-speed choices of `hfzoo.models.weight_layout`: weight layouts and the few-rows vocabulary projection.

Both change how a product is computed, never what it is: these tests pin the values, the layouts, and the cases
that must fall back to the module's own call.
"""

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from hfzoo.models.weight_layout import FEW_ROWS, arrange_weights, project_rows


def test_projections_keep_their_smaller_dimension_outermost_for_inference_and_larger_for_training(tiny_model, tmp_path):
    model = tiny_model("llama-tiny")  # hidden 128: gate_up (704) and qkv (256) widen 2x or more, down (352) narrows
    model.save_pretrained(tmp_path)
    for candidate in (model, AutoModelForCausalLM.from_pretrained(tmp_path)):  # both in eval mode
        gate_up = candidate.model.layers[0].mlp.up_proj.weight
        assert gate_up.shape == (704, 128) and gate_up.stride() == (1, 704)
        assert candidate.model.layers[0].self_attn.qkv_proj.weight.stride() == (1, 256)
        assert candidate.model.layers[0].self_attn.o_proj.weight.is_contiguous()
        assert candidate.model.layers[0].mlp.down_proj.weight.is_contiguous()
        assert candidate.lm_head.weight.is_contiguous()  # the untied head stays row-major (training cost)
        assert all(parameter.data_ptr() % 64 == 0 for parameter in candidate.parameters())
        candidate.train()  # training: the larger dimension outermost
        assert gate_up.is_contiguous() and candidate.model.layers[0].self_attn.qkv_proj.weight.is_contiguous()
        assert candidate.model.layers[0].mlp.down_proj.weight.stride() == (1, 128)
        assert candidate.model.layers[0].self_attn.o_proj.weight.is_contiguous()
        assert all(parameter.data_ptr() % 64 == 0 for parameter in candidate.parameters())


def test_switching_modes_mid_training_changes_no_value(tiny_model):
    """An evaluation between optimizer steps moves weights to the inference layout and back; the optimizer keeps
    its parameters and state, and training ends exactly where it ends without the evaluations."""
    batch = {"input_ids": torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))}
    batch["labels"] = batch["input_ids"]
    finals = []
    for evaluate_between_steps in (False, True):
        model = tiny_model("llama-tiny", hidden_dropout=0.0, attention_dropout=0.0).train()
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
        for _ in range(3):
            model(**batch).loss.backward()
            optimizer.step()
            optimizer.zero_grad()
            if evaluate_between_steps:
                with torch.no_grad():
                    model.eval()(**batch)
                assert model.model.layers[0].mlp.up_proj.weight.stride() == (1, 704)
                model.train()
        finals.append(model.eval()(**batch).logits)
    torch.testing.assert_close(finals[0], finals[1], rtol=0, atol=0)


def test_arranging_keeps_values_and_parameter_identity():
    linear = nn.Linear(8, 32).eval()
    parameter, values = linear.weight, linear.weight.detach().clone()
    arrange_weights(linear)
    assert linear.weight is parameter and torch.equal(linear.weight, values) and linear.weight.stride() == (1, 32)
    arrange_weights(linear.train())
    assert linear.weight is parameter and torch.equal(linear.weight, values) and linear.weight.is_contiguous()
    narrowing = nn.Linear(32, 8)
    arrange_weights(narrowing)
    assert narrowing.weight.stride() == (1, 8)
    arrange_weights(narrowing.eval())
    assert narrowing.weight.is_contiguous()

    flat = torch.zeros(8 * 32 + 8)
    shared = nn.Linear(8, 32).eval()
    shared.weight.data = flat[8:].view(32, 8)  # a view into a larger buffer, as FSDP's flat parameters are
    arrange_weights(shared)
    assert shared.weight.data_ptr() == flat[8:].data_ptr(), "a weight that does not own its storage must not move"


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
