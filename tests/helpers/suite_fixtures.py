"""The fixtures that tests in every folder may use, registered by tests/conftest.py in each process that runs tests.

Tests build real objects only: a byte-level BPE tokenizer trained here on real English (stdlib docstrings),
tiny models from the presets, and the shared real data sets when they are present.
"""

import ast
import copy
import importlib
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState, GradientState
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from tests.helpers.area_task import base, finetuned  # noqa: F401 (fixtures)
from tests.helpers.paths import SHARED_DATA
from tests.helpers.remote_code import hfzoo_free_python  # noqa: F401 (fixture)
from tests.helpers.tiny_checkpoints import checkpoints, gpt_tiny_checkpoint, native_folders  # noqa: F401 (fixtures)
from transformers import AutoModelForCausalLM, PreTrainedModel, PreTrainedTokenizerFast

import hfzoo

# Test models are tiny: a second intra-op thread buys nothing, and on a busy 2-core machine OpenMP's
# thread hand-offs cost milliseconds per kernel (measured: one small SDPA call 27 ms with 2 threads, 5 us with 1).
torch.set_num_threads(1)

# Stdlib modules whose docstrings are the tokenizer's training text: real prose, present on every machine.
_DOCSTRING_MODULES = ("argparse", "collections", "json", "pathlib", "textwrap", "functools", "dataclasses", "string")
TOKENIZER_VOCAB_SIZE = 1000


@pytest.fixture(autouse=True)
def fresh_accelerate_state() -> None:
    """accelerate keeps one process-wide state, which the first `Accelerator` fixes (its mixed precision, its
    device): each test starts from none, as a new process would, whatever the test before it in this worker left."""
    yield
    GradientState._reset_state()
    AcceleratorState._reset_state(reset_partial_state=True)


@pytest.fixture
def shared_data() -> Path:
    """`../shared/data` beside the repository; tests that need real data sets skip without it."""
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    return SHARED_DATA


def stdlib_docstrings() -> list[str]:
    """Module, class and function docstrings (longer than 40 characters) of a few stdlib modules."""
    texts = []
    for name in _DOCSTRING_MODULES:
        source = Path(importlib.import_module(name).__file__).read_text(encoding="utf-8")
        for node in ast.walk(ast.parse(source)):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node)
                if docstring and len(docstring) > 40:
                    texts.append(docstring)
    return texts


@pytest.fixture(scope="session")
def docstring_texts() -> list[str]:
    return stdlib_docstrings()


@pytest.fixture(scope="session")
def tokenizer(docstring_texts: list[str]) -> PreTrainedTokenizerFast:
    """Byte-level BPE (vocab 1000) trained with `tokenizers` directly; left padding, as generation needs."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB_SIZE,
        special_tokens=["<pad>", "<s>", "</s>", "<unk>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(docstring_texts, trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        pad_token="<pad>",
        bos_token="<s>",
        eos_token="</s>",
        unk_token="<unk>",
        padding_side="left",
    )


@pytest.fixture(scope="session")
def tokenizer_overrides(tokenizer: PreTrainedTokenizerFast) -> dict[str, int]:
    """Config overrides that make a model's vocabulary and special tokens match the `tokenizer` fixture."""
    return dict(
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )


def build_tiny_model(preset: str, auto_class=AutoModelForCausalLM, seed: int = 0, **overrides) -> PreTrainedModel:
    """A freshly initialised fp32 model of `preset` in eval mode, dropout 0 unless overridden."""
    overrides = {"hidden_dropout": 0.0, "attention_dropout": 0.0, **overrides}
    config = hfzoo.preset_config(preset, **overrides)
    torch.manual_seed(seed)
    # from_config shares/mutates its config (e.g. the attention implementation): give each model its own.
    return auto_class.from_config(copy.deepcopy(config)).eval()


@pytest.fixture(params=["gpt-tiny", "llama-tiny"])
def decoder_preset(request) -> str:
    """The decoder presets every conformance test runs on: GPT-2 style and Llama style."""
    return request.param


@pytest.fixture(scope="session")
def tiny_model() -> Callable[..., PreTrainedModel]:
    """Factory `tiny_model(preset, auto_class=AutoModelForCausalLM, seed=0, **config_overrides)`."""
    return build_tiny_model


@pytest.fixture
def accelerator() -> Accelerator:
    """A fresh single-process CPU Accelerator; accelerate's process-wide state is reset afterwards."""
    yield Accelerator(cpu=True)
    GradientState._reset_state()
    AcceleratorState._reset_state(reset_partial_state=True)
