"""The CPU-speed choices of `hfzoo.core.cpu_layout`: weight layouts and the few-rows vocabulary projection.

Both change how a product is computed, never what it is, and neither is part of the code saved with a checkpoint:
these tests pin the values, the layouts, the files, and the cases that must fall back to `nn.Linear`'s own product.
"""

import torch
from torch import nn
from transformers import AutoModelForCausalLM

from hfzoo.core.cpu_layout import FEW_ROWS, FewRowsLinear, ModeFollowingLinear, tune_for_cpu


def test_projections_keep_their_smaller_dimension_outermost_for_inference_and_larger_for_training(tiny_model, tmp_path):
    model = tiny_model("llama-tiny")  # hidden 128: gate_up (704) and qkv (256) widen 2x or more, down (352) narrows
    model.save_pretrained(tmp_path)
    for candidate in (tune_for_cpu(model), tune_for_cpu(AutoModelForCausalLM.from_pretrained(tmp_path))):  # eval
        gate_up = candidate.model.layers[0].mlp.up_proj.weight
        assert gate_up.shape == (704, 128) and gate_up.stride() == (1, 704)
        assert candidate.model.layers[0].self_attn.qkv_proj.weight.stride() == (1, 256)
        assert candidate.model.layers[0].self_attn.o_proj.weight.is_contiguous()
        assert candidate.model.layers[0].mlp.down_proj.weight.is_contiguous()
        assert type(candidate.lm_head) is FewRowsLinear and candidate.lm_head.weight.is_contiguous()
        assert all(parameter.data_ptr() % 64 == 0 for parameter in candidate.parameters())
        candidate.train()  # training: the larger dimension outermost
        assert gate_up.is_contiguous() and candidate.model.layers[0].self_attn.qkv_proj.weight.is_contiguous()
        assert candidate.model.layers[0].mlp.down_proj.weight.stride() == (1, 128)
        assert candidate.model.layers[0].self_attn.o_proj.weight.is_contiguous()


def test_tuning_changes_neither_the_logits_nor_what_save_pretrained_writes(tiny_model, tmp_path):
    model = tiny_model("llama-tiny")
    input_ids = torch.randint(0, 512, (3, 9), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain_logits = model(input_ids).logits
        plain_state = {name: tensor.clone() for name, tensor in model.state_dict().items()}
        tune_for_cpu(model)
        torch.testing.assert_close(model(input_ids).logits, plain_logits)
    tuned_state = model.state_dict()
    assert tuned_state.keys() == plain_state.keys()
    assert all(torch.equal(tuned_state[name], tensor) for name, tensor in plain_state.items())
    model.save_pretrained(tmp_path)
    saved_code = "".join(path.read_text() for path in tmp_path.glob("*.py"))
    assert "cpu_layout" not in saved_code and "FewRowsLinear" not in saved_code
    assert type(AutoModelForCausalLM.from_pretrained(tmp_path).lm_head) is nn.Linear


def test_switching_modes_mid_training_changes_no_value(tiny_model):
    """An evaluation between optimizer steps moves weights to the inference layout and back; the optimizer keeps
    its parameters and state, and training ends exactly where it ends without the evaluations."""
    batch = {"input_ids": torch.randint(0, 512, (2, 16), generator=torch.Generator().manual_seed(0))}
    batch["labels"] = batch["input_ids"]
    finals = []
    for evaluate_between_steps in (False, True):
        model = tune_for_cpu(tiny_model("llama-tiny", hidden_dropout=0.0, attention_dropout=0.0).train())
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
    tune_for_cpu(linear)
    assert type(linear) is ModeFollowingLinear
    assert linear.weight is parameter and torch.equal(linear.weight, values) and linear.weight.stride() == (1, 32)
    linear.train()
    assert linear.weight is parameter and torch.equal(linear.weight, values) and linear.weight.is_contiguous()
    narrowing = tune_for_cpu(nn.Linear(32, 8))
    assert narrowing.weight.stride() == (1, 8)
    narrowing.eval()
    assert narrowing.weight.is_contiguous()
    assert type(tune_for_cpu(nn.Linear(8, 12))) is nn.Linear, "a projection widening less than 2x stays as it is"

    flat = torch.zeros(8 * 32 + 8)
    shared = nn.Linear(8, 32).eval()
    shared.weight.data = flat[8:].view(32, 8)  # a view into a larger buffer, as FSDP's flat parameters are
    tune_for_cpu(shared)
    assert shared.weight.data_ptr() == flat[8:].data_ptr(), "a weight that does not own its storage must not move"


def test_few_rows_projection_equals_the_module_and_falls_back_where_it_must():
    torch.manual_seed(0)
    plain = nn.Linear(64, 1000)
    head = FewRowsLinear(64, 1000)
    head.load_state_dict(plain.state_dict())
    for rows in (1, 2, 8, 32, 33):
        states = torch.randn(rows, 1, 64)
        with torch.no_grad():
            torch.testing.assert_close(head(states), plain(states), rtol=1e-5, atol=1e-5)
            assert head(states).is_contiguous()
    states = torch.randn(4, 64, requires_grad=True)
    assert head(states).grad_fn.name() == plain(states).grad_fn.name()  # training: nn.Linear's product

    calls = []
    head.register_forward_hook(lambda module, args, output: calls.append(len(output)))
    with torch.no_grad():
        head(torch.randn(4, 64))
    assert calls == [4], "hooks (accelerate offloading, output recording) run around the reordered product too"
    assert 2 in FEW_ROWS and 32 in FEW_ROWS and 1 not in FEW_ROWS
