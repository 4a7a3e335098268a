"""transformers 5.24 renamed the outputs' `past_key_values` field to `cache` and logs
"`past_key_values`/`cache_params` are deprecated. Use `cache` instead." whenever an output is built or read by the
old name. hfzoo's models build and read outputs by the installed version's name (`models.compat.CACHE_FIELD`), so
training and generation log no such warning under 5.23 or 5.24.
"""

import logging
from pathlib import Path

import pytest
import torch
import transformers
from tests.helpers.recipe_runs import run_pretrain
from transformers import AutoModelForCausalLM, AutoModelForSeq2SeqLM, AutoModelForSequenceClassification

from hfzoo.core.presets import preset_config

DEPRECATION = "are deprecated. Use `cache`"


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())


@pytest.fixture
def transformers_warnings():
    """Every message transformers logs during the test; `warning_once`'s memory of earlier tests is cleared."""
    logging.Logger.warning_once.cache_clear()
    handler = _Collect()
    root = transformers.logging.get_logger("transformers")
    root.addHandler(handler)
    yield handler.messages
    root.removeHandler(handler)


def test_short_training_run_logs_no_cache_deprecation(tmp_path: Path, transformers_warnings: list[str]):
    """`hfzoo pretrain` on the test config: two optimizer steps on gpt-tiny, an evaluation and the save."""
    run_pretrain("--max_steps", "2", "--eval_every", "2", "--save_every", "2", "--output_dir", str(tmp_path / "run"))
    assert not [m for m in transformers_warnings if DEPRECATION in m]


@pytest.mark.parametrize("name", ["llama-tiny", "t5-tiny"])
def test_training_step_and_generation_log_no_cache_deprecation(name: str, transformers_warnings: list[str]):
    """A training step and a cached generate for each family with a cache, through every head that returns one."""
    torch.manual_seed(0)
    seq2seq = name == "t5-tiny"
    lm = (AutoModelForSeq2SeqLM if seq2seq else AutoModelForCausalLM).from_config(preset_config(name))
    classifier = AutoModelForSequenceClassification.from_config(
        preset_config(name, num_labels=2, pad_token_id=0, eos_token_id=1)
    )
    ids = torch.randint(3, 100, (2, 8))
    ids[:, -1] = 1  # the encoder-decoder classifier reads the state at eos
    extra = {"decoder_input_ids": ids} if seq2seq else {}
    lm(input_ids=ids, labels=ids, **extra).loss.backward()
    classifier(input_ids=ids, labels=torch.tensor([0, 1])).loss.backward()
    lm.eval()
    out = lm(input_ids=ids, use_cache=True, **extra)
    assert out[1] is not None  # the cache, read by position as version-neutral code does
    lm.generate(input_ids=ids, max_new_tokens=3, do_sample=False)
    assert not [m for m in transformers_warnings if DEPRECATION in m]
