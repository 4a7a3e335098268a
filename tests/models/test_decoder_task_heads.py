"""The decoder's multiple-choice head (no native counterpart to compare with): each choice is scored from its own
last real token, whatever the padding, and the loss is the cross-entropy over the choices. Its question-answering
head is compared with GPT-2's and Llama's in test_convert.py."""

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModelForMultipleChoice

from hfzoo import preset_config
from hfzoo.models import ZooDecoderForMultipleChoice

PAD = 0


def choices_batch() -> dict[str, torch.Tensor]:
    """2 questions x 3 choices of different lengths, left-padded with PAD."""
    lengths = torch.tensor([[5, 3, 4], [2, 5, 1]])
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(3, 100, (2, 3, 5), generator=generator)
    attention_mask = (torch.arange(5) >= 5 - lengths[..., None]).long()
    return {"input_ids": input_ids.masked_fill(attention_mask == 0, PAD), "attention_mask": attention_mask}


@pytest.mark.parametrize("preset", ["gpt-tiny", "llama-tiny"])
def test_each_choice_is_scored_alone_from_its_last_real_token(preset, tiny_model):
    model = tiny_model(preset, AutoModelForMultipleChoice, pad_token_id=PAD)
    batch = choices_batch()
    labels = torch.tensor([2, 0])
    with torch.no_grad():
        output = model(**batch, labels=labels)
        expected = torch.empty(2, 3)
        for row in range(2):
            for choice in range(3):
                real = batch["attention_mask"][row, choice].bool()
                hidden = model.model(input_ids=batch["input_ids"][row, choice][real][None]).last_hidden_state
                expected[row, choice] = model.score(hidden[0, -1])[0]
    assert output.logits.shape == (2, 3)
    torch.testing.assert_close(output.logits, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(output.loss, F.cross_entropy(expected, labels), atol=1e-5, rtol=0)


def test_a_batch_of_choices_without_a_pad_token_is_refused():
    model = ZooDecoderForMultipleChoice(preset_config("gpt-tiny")).eval()
    with pytest.raises(ValueError, match="ZooDecoderForMultipleChoice pools the last non-padding token and needs "
                                         "config.pad_token_id"):  # fmt: skip
        model(**choices_batch())
