import pytest
import torch
from transformers import GPT2Config, GPT2ForTokenClassification

from hfzoo.training.task_model import override_config


def test_config_overrides_take_a_head_dropout_the_native_config_lacks_and_refuse_a_misspelling():
    """GPT-2's config has no `classifier_dropout`, yet its token classifier reads one when present: the override
    reaches that head's dropout. A near miss of it is refused with the key it meant."""
    config = GPT2Config(n_layer=1, n_embd=16, n_head=2, vocab_size=64)
    assert not hasattr(config, "classifier_dropout")
    model = GPT2ForTokenClassification(override_config(config, {"classifier_dropout": 0.25}))
    assert model.dropout.p == 0.25 and isinstance(model.dropout, torch.nn.Dropout)
    with pytest.raises(ValueError, match=r"no 'classifer_dropout'\. Did you mean 'classifier_dropout'\?"):
        override_config(config, {"classifer_dropout": 0.25})
