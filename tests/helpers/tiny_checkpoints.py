"""Tiny checkpoint folders, as `hfzoo pretrain` or transformers would leave them, that tests in several folders
train or load: hfzoo checkpoints with tokenizers trained on the shared data sets, small native transformers models,
and a gpt-tiny checkpoint with the suite's docstring tokenizer."""

from __future__ import annotations

import itertools
import json
from pathlib import Path

import pytest
import torch
import transformers
from tests.helpers.paths import SHARED_DATA
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM, AutoModelForMaskedLM, AutoModelForSeq2SeqLM, AutoTokenizer

import hfzoo
from hfzoo.data.tokenizer_training import train_tokenizer

# preset -> (tokenizer kind, the family's language-model Auto class): the checkpoints a user would have pretrained.
CHECKPOINTS = {
    "gpt-tiny": ("bpe", AutoModelForCausalLM),
    "bert-tiny": ("wordpiece", AutoModelForMaskedLM),
    "t5-tiny": ("bpe", AutoModelForSeq2SeqLM),
}
# family -> (native class saved as the "pretrained" checkpoint, its config, the session checkpoint whose tokenizer
# it uses: a WordPiece one for BERT, a BPE one for Llama)
SIZES = dict(hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
             max_position_embeddings=64)  # fmt: skip
NATIVE = {
    "bert": ("BertForMaskedLM", transformers.BertConfig, SIZES, "bert-tiny"),
    "llama": ("LlamaForCausalLM", transformers.LlamaConfig, {**SIZES, "num_key_value_heads": 2}, "gpt-tiny"),
}


def first_lines(path: Path, count: int) -> list[str]:
    """The first `count` lines of a text file, without their line ends."""
    with path.open(encoding="utf-8") as f:
        return [line.rstrip("\n") for line in itertools.islice(f, count)]


def _tokenizer_texts() -> list[str]:
    """Real text from every data set the tests fine-tune on, so each tokenizer covers them all."""
    data = SHARED_DATA
    texts = [line.split("\t")[0] for line in first_lines(data / "sst2" / "train.tsv", 2000)[1:]]
    texts += [" ".join(line.split("\t")[1:3]) for line in first_lines(data / "rte" / "train.tsv", 300)[1:]]
    texts += [line.split(" ")[0] for line in first_lines(data / "conll2003" / "train.txt", 4000) if line.strip()]
    texts += first_lines(data / "multi30k" / "train.en", 1000) + first_lines(data / "multi30k" / "train.de", 1000)
    squad = json.loads((data / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    texts += [p["context"] for article in squad["data"][:5] for p in article["paragraphs"]]
    return texts


@pytest.fixture(scope="session")
def checkpoints(tmp_path_factory) -> dict[str, Path]:
    """preset -> folder with a random-init LM checkpoint and its trained tokenizer, as `hfzoo pretrain` leaves them.

    Built once per session (and worker: the folder is reused if present).
    """
    if not SHARED_DATA.is_dir():
        pytest.skip(f"shared data sets not found at {SHARED_DATA}")
    root = tmp_path_factory.getbasetemp() / "finetune-checkpoints"
    folders = {preset: root / preset for preset in CHECKPOINTS}
    if all((folder / "config.json").is_file() for folder in folders.values()):
        return folders
    texts = _tokenizer_texts()
    for preset, (kind, auto_class) in CHECKPOINTS.items():
        family = hfzoo.core.presets.preset_family(preset)
        tokenizer = train_tokenizer(texts, kind, 1000, family, num_sentinels=4)
        special = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id}
        if family == "decoder":
            special["bos_token_id"] = tokenizer.bos_token_id
        torch.manual_seed(0)
        model = auto_class.from_config(hfzoo.preset_config(preset, vocab_size=len(tokenizer), **special))
        model.save_pretrained(folders[preset])
        tokenizer.save_pretrained(folders[preset])
    return folders


@pytest.fixture(scope="module")
def native_folders(checkpoints, tmp_path_factory) -> dict[str, Path]:
    """family -> a folder holding a small random native checkpoint and the session's tokenizer, as a user's
    pretrained transformers model would be (transformers' own class, no hfzoo code)."""
    folders = {}
    for family, (class_name, config_class, sizes, tokenizer_source) in NATIVE.items():
        tokenizer = AutoTokenizer.from_pretrained(checkpoints[tokenizer_source])
        special = {"pad_token_id": tokenizer.pad_token_id, "eos_token_id": tokenizer.eos_token_id,
                   "bos_token_id": tokenizer.bos_token_id}  # fmt: skip
        torch.manual_seed(0)
        model = getattr(transformers, class_name)(config_class(vocab_size=len(tokenizer), **sizes, **special))
        folders[family] = tmp_path_factory.mktemp(f"native-{family}")
        model.save_pretrained(folders[family])
        tokenizer.save_pretrained(folders[family])
    return folders


@pytest.fixture(scope="module")
def gpt_tiny_checkpoint(tmp_path_factory, tokenizer) -> Path:
    """An intact gpt-tiny checkpoint with the `tokenizer` fixture's tokenizer."""
    folder = tmp_path_factory.mktemp("intact") / "gpt-tiny"
    torch.manual_seed(0)
    config = hfzoo.preset_config("gpt-tiny", vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_token_id)
    AutoModelForCausalLM.from_config(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def random_lora(model, folder: Path, seed: int) -> Path:
    """A LoRA of `model` saved in `folder`, with random (non-zero) B, so that it visibly changes the continuation;
    `model` is left without it."""
    torch.manual_seed(seed)
    peft_model = get_peft_model(model, LoraConfig(r=4, lora_alpha=32, init_lora_weights=False))
    peft_model.save_pretrained(folder)
    peft_model.unload()
    return folder
