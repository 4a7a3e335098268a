"""The `char` tokenizer kind: one token per character of the corpus, saved as a fast tokenizer that reloads with
AutoTokenizer and gives back every text made of the corpus's characters exactly (whitespace and newlines too)."""

import pytest
from transformers import AutoTokenizer, PreTrainedTokenizerFast

from hfzoo.data.tokenizer_training import train_tokenizer

TEXTS = ["First Citizen:\nBefore we proceed any further, hear me speak.\n\n", "  tabs\tand\r\nCRLF, é 漢 🐍 \x00"]
SPECIALS = {"decoder": 4, "encoder": 5, "encoder_decoder": 4 + 3}


@pytest.mark.parametrize("family", ["decoder", "encoder", "encoder_decoder"])
def test_vocabulary_is_the_specials_then_the_corpus_characters(family, tmp_path):
    tokenizer = train_tokenizer(TEXTS, "char", 1000, family, num_sentinels=3)
    characters = sorted(set("".join(TEXTS)))
    vocabulary = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    assert [token for token, _ in vocabulary[SPECIALS[family]:]] == characters
    assert tokenizer.pad_token_id == 0
    tokenizer.save_pretrained(tmp_path)
    reloaded = AutoTokenizer.from_pretrained(tmp_path)
    assert isinstance(reloaded, PreTrainedTokenizerFast) and reloaded.get_vocab() == tokenizer.get_vocab()
    for text in TEXTS:
        ids = reloaded(text)["input_ids"]
        assert reloaded.decode(ids, skip_special_tokens=True) == text
        assert len(reloaded(text, add_special_tokens=False)["input_ids"]) == len(text)  # one token per character
    unseen = reloaded("x?", add_special_tokens=False)["input_ids"]  # characters the corpus does not have
    assert reloaded.convert_ids_to_tokens(unseen) == [reloaded.unk_token] * 2


def test_batches_of_texts_are_read_and_a_small_vocab_size_is_named():
    assert len(train_tokenizer(iter([TEXTS[:1], TEXTS[1:]]), "char", 1000)) == 4 + len(set("".join(TEXTS)))
    with pytest.raises(ValueError, match=r"the corpus has \d+ distinct characters, .* exceed vocab_size=20"):
        train_tokenizer(TEXTS, "char", 20)


def test_tiny_shakespeare_round_trips_exactly(shared_data, tmp_path):
    text = (shared_data / "tinyshakespeare" / "input.txt").read_text(encoding="utf-8")
    train_tokenizer([text], "char", 4096).save_pretrained(tmp_path)
    tokenizer = AutoTokenizer.from_pretrained(tmp_path)
    assert len(tokenizer) == 4 + 65  # nanoGPT's 65 characters
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == len(text) and tokenizer.decode(ids) == text
