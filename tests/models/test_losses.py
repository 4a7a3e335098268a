"""The fused vocabulary losses compute exactly transformers' language-model losses, values and gradients."""

import pytest
import torch
from transformers import AutoModelForMaskedLM, AutoModelForSeq2SeqLM
from transformers.loss.loss_utils import ForCausalLMLoss, ForMaskedLMLoss

from hfzoo.models.losses import causal_lm_loss, masked_lm_loss

VOCAB = 50


def loss_and_gradient(loss_function, logits, labels, **kwargs):
    logits = logits.detach().clone().requires_grad_()
    loss = loss_function(logits, labels, VOCAB, **kwargs)
    loss.backward()
    return loss.detach(), logits.grad


@pytest.mark.parametrize("kwargs", [{}, {"num_items_in_batch": torch.tensor(9)}, {"num_items_in_batch": 7}])
@pytest.mark.parametrize(("fused", "reference"), [(causal_lm_loss, ForCausalLMLoss), (masked_lm_loss, ForMaskedLMLoss)])
def test_fused_losses_equal_transformers_losses_and_gradients(fused, reference, kwargs):
    torch.manual_seed(0)
    logits = torch.randn(3, 7, VOCAB) * 4
    labels = torch.randint(VOCAB, (3, 7))
    labels[0, :3] = -100
    labels[2, 4] = -100
    expected_loss, expected_grad = loss_and_gradient(reference, logits, labels, **kwargs)
    loss, grad = loss_and_gradient(fused, logits, labels, **kwargs)
    torch.testing.assert_close(loss, expected_loss, rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-6, atol=1e-7)


def test_explicit_shift_labels_and_bf16_logits_match_transformers():
    torch.manual_seed(0)
    logits = torch.randn(2, 5, VOCAB).bfloat16()
    shift_labels = torch.randint(VOCAB, (2, 5))
    shift_labels[1, -1] = -100
    kwargs = {"shift_labels": shift_labels}
    expected_loss, expected_grad = loss_and_gradient(ForCausalLMLoss, logits, None, **kwargs)
    loss, grad = loss_and_gradient(causal_lm_loss, logits, None, **kwargs)
    assert loss.dtype == torch.float32 and grad.dtype == torch.bfloat16
    torch.testing.assert_close(loss, expected_loss)
    torch.testing.assert_close(grad, expected_grad)


def test_a_label_outside_the_vocabulary_is_named():
    labels = torch.tensor([[1, 2, VOCAB + 3]])
    with pytest.raises(ValueError, match=f"Label {VOCAB + 3} at flattened position 2 .*0 to {VOCAB - 1}"):
        masked_lm_loss(torch.randn(1, 3, VOCAB), labels, VOCAB)


def test_models_train_with_the_fused_loss_unless_the_user_sets_one(tiny_model):
    for name, auto_class in (("bert-tiny", AutoModelForMaskedLM), ("t5-tiny", AutoModelForSeq2SeqLM), ("gpt-tiny", None)):
        model = tiny_model(name, auto_class=auto_class) if auto_class else tiny_model(name)
        assert model.loss_function in (causal_lm_loss, masked_lm_loss), name
    model.loss_function = ForCausalLMLoss
    assert model.loss_function is ForCausalLMLoss
    input_ids = torch.tensor([[5, 6, 7, 8, 9]])
    outputs = model(input_ids, labels=input_ids)
    torch.testing.assert_close(outputs.loss, ForCausalLMLoss(outputs.logits, input_ids, model.config.vocab_size))
