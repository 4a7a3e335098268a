"""Train a tokenizer from scratch for one of hfzoo's model families.

Pretraining on a small or unusual corpus wants a vocabulary fitted to it. This module trains
one with the ``tokenizers`` library (``bpe``: byte-level BPE that round-trips any text exactly;
``wordpiece``: BERT-style; ``unigram``: SentencePiece-style; ``char``: one token per character of the
corpus, as character-level language models such as char-rnn and nanoGPT's Shakespeare use) and wraps it in a
:class:`transformers.PreTrainedTokenizerFast` with the special tokens each family expects, at
fixed ids (pad is always 0), so it saves with ``save_pretrained`` and reloads with
``AutoTokenizer.from_pretrained``:

* ``decoder``: ``<pad>`` ``<s>`` ``</s>`` ``<unk>``; nothing added around a text (documents are
  separated by ``</s>`` when packed); padding on the left for batched generation.
* ``bilm`` (ELMo's biLSTM): the decoder's tokens, padding on the right (nothing is generated).
* ``encoder``: ``[PAD]`` ``[UNK]`` ``[CLS]`` ``[SEP]`` ``[MASK]``; ``[CLS] a [SEP]`` and
  ``[CLS] a [SEP] b [SEP]`` with ``token_type_ids`` 0/1, as BERT.
* ``encoder_decoder``: ``<pad>`` ``</s>`` ``<unk>`` ``<mask>`` ``<extra_id_0>`` ... as T5
  (``</s>`` appended; pad id 0 doubles as ``decoder_start_token_id``), ``<mask>`` for
  BART-style denoising.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

import datasets
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers
from transformers import PreTrainedTokenizerFast

Kind = Literal["bpe", "wordpiece", "unigram", "char"]
KINDS: tuple[str, ...] = Kind.__args__
Family = Literal["decoder", "encoder", "encoder_decoder", "bilm"]


def _family_tokens(family: Family, num_sentinels: int) -> tuple[dict[str, str], list[str]]:
    """Named special tokens (role -> token) and extra ones, in id order after the named ones."""
    if family in ("decoder", "bilm"):
        return {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}, []
    if family == "encoder":
        names = ("pad_token", "unk_token", "cls_token", "sep_token", "mask_token")
        return dict(zip(names, ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"))), []
    if family == "encoder_decoder":
        named = {"pad_token": "<pad>", "eos_token": "</s>", "unk_token": "<unk>", "mask_token": "<mask>"}
        return named, [f"<extra_id_{i}>" for i in range(num_sentinels)]
    raise ValueError(f"unknown family {family!r}; expected 'decoder', 'encoder', 'encoder_decoder' or 'bilm'")


def _backend(
    kind: Kind, vocab_size: int, specials: list[str], unk: str, show_progress: bool
) -> tuple[Tokenizer, trainers.Trainer]:
    """An untrained ``tokenizers.Tokenizer`` and the trainer that fits it."""
    if kind == "bpe":
        tokenizer = Tokenizer(models.BPE())
        tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tokenizer.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(
            vocab_size=vocab_size,
            special_tokens=specials,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=show_progress,
        )
    elif kind == "wordpiece":
        tokenizer = Tokenizer(models.WordPiece(unk_token=unk))
        tokenizer.normalizer = normalizers.BertNormalizer(lowercase=False, strip_accents=False)
        tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
        tokenizer.decoder = decoders.WordPiece()
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocab_size, special_tokens=specials, show_progress=show_progress
        )
    elif kind == "unigram":
        tokenizer = Tokenizer(models.Unigram())
        tokenizer.normalizer = normalizers.NFKC()
        tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
        tokenizer.decoder = decoders.Metaspace()
        trainer = trainers.UnigramTrainer(
            vocab_size=vocab_size, special_tokens=specials, unk_token=unk, show_progress=show_progress
        )
    else:
        raise ValueError(f"unknown kind {kind!r}; expected one of {', '.join(KINDS)}")
    return tokenizer, trainer


def _wordpiece_backend(
    texts: Iterable[str] | Iterable[list[str]], vocab_size: int, specials: list[str], unk: str, show_progress: bool,
    length: int | None,
) -> Tokenizer:
    """``tokenizers``' WordPiece trainer, made deterministic: the same texts give the same vocabulary, ids included.

    Why: the trainer numbers the continuing-subword tokens (``##e``) in hash-map order, a new one per run, and breaks
    ties between equally frequent merges by those numbers, so two trainings on the same texts number tokens
    differently and, on a tie at the vocabulary's last slot, keep different tokens (huggingface/tokenizers#1794;
    measured here: 2 of 3 trainings of an 8,000-token vocabulary on 600 enwiki articles differed). A first pass
    without merges finds the continuing-subword tokens; the second gives them fixed, sorted ids as leading special
    tokens, which the trainer then never renumbers; they become ordinary vocabulary again afterwards. Reads `texts`
    twice.
    """

    def trained(continuations: list[str], size: int) -> Tokenizer:
        tokenizer, trainer = _backend("wordpiece", size, [*specials, *continuations], unk, show_progress)
        tokenizer.train_from_iterator(texts, trainer=trainer, length=length)
        return tokenizer

    alphabet_only = trained([], len(specials) + 1)  # the trainer keeps every character and continuation, no merge
    prefix = alphabet_only.model.continuing_subword_prefix
    continuations = sorted(token for token in alphabet_only.get_vocab(with_added_tokens=False)
                           if token.startswith(prefix) and len(token) == len(prefix) + 1)  # fmt: skip
    fitted = trained(continuations, vocab_size)
    vocabulary = fitted.get_vocab(with_added_tokens=False)
    tokenizer = Tokenizer(models.WordPiece(vocabulary, unk_token=unk, continuing_subword_prefix=prefix,
                                           max_input_chars_per_word=fitted.model.max_input_chars_per_word))  # fmt: skip
    tokenizer.normalizer, tokenizer.pre_tokenizer, tokenizer.decoder = (
        fitted.normalizer, fitted.pre_tokenizer, fitted.decoder
    )
    tokenizer.add_special_tokens(specials)
    return tokenizer


def _char_backend(
    texts_iterator: Iterable[str] | Iterable[list[str]], vocab_size: int, specials: list[str], unk: str
) -> Tokenizer:
    """A ``tokenizers.Tokenizer`` whose vocabulary is the special tokens, then every character of the corpus (sorted,
    so the ids do not depend on the order of the texts). Decoding fuses the tokens back unchanged, so a text made of
    the corpus's characters round-trips exactly, whitespace and newlines included; any other character becomes
    ``unk``.

    The model is BPE without merges and without a pre-tokenizer: it reads a text as one word, which BPE splits into
    characters and maps to ids in one pass, twice as fast as a word-level model over a pre-tokenizer that isolates
    every character (the same ids; 0.7 s against 1.5 s for Tiny Shakespeare's million characters here). Words over
    a few hundred characters skip BPE's cache, so a long document is not kept in memory."""
    characters: set[str] = set()
    for item in texts_iterator:
        characters.update(item if isinstance(item, str) else "".join(item))
    characters.difference_update(specials)
    if len(specials) + len(characters) > vocab_size:
        raise ValueError(
            f"the corpus has {len(characters)} distinct characters, which with {len(specials)} special tokens exceed "
            f"vocab_size={vocab_size}; raise vocab_size (a char tokenizer keeps every character of the corpus)"
        )
    vocabulary = {token: index for index, token in enumerate([*specials, *sorted(characters)])}
    tokenizer = Tokenizer(models.BPE(vocabulary, merges=[], unk_token=unk))
    tokenizer.decoder = decoders.Fuse()
    return tokenizer


def _post_processor(family: Family, tokenizer: Tokenizer) -> processors.PostProcessor | None:
    if family == "encoder":
        cls, sep = ("[CLS]", tokenizer.token_to_id("[CLS]")), ("[SEP]", tokenizer.token_to_id("[SEP]"))
        return processors.TemplateProcessing(
            single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B:1 [SEP]:1", special_tokens=[cls, sep]
        )
    if family == "encoder_decoder":
        return processors.TemplateProcessing(
            single="$A </s>", pair="$A </s> $B </s>", special_tokens=[("</s>", tokenizer.token_to_id("</s>"))]
        )
    return None  # decoder, bilm: packing inserts </s> between documents, nothing per text


def train_tokenizer(
    texts_iterator: Iterable[str] | Iterable[list[str]],
    kind: Kind = "bpe",
    vocab_size: int = 8000,
    family: Family = "decoder",
    num_sentinels: int = 100,
    *,
    length: int | None = None,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """Train a ``kind`` tokenizer on ``texts_iterator`` with ``family``'s special tokens.

    Args:
        texts_iterator: texts, or batches (lists) of texts: an iterator is consumed once (WordPiece keeps its texts
            in memory to read them twice), any other iterable is read again where needed.
        kind: ``"bpe"`` (byte-level, lossless), ``"wordpiece"``, ``"unigram"`` or ``"char"``. All but unigram
            train the same file from the same texts; unigram's trainer sums its scores in hash order, so their last
            bits, and the ids of nearly equal tokens, vary from one training to the next.
        vocab_size: total vocabulary size, special tokens included (unigram may stop short
            on a small corpus; for ``"char"`` an upper bound: its vocabulary is the corpus's characters).
        family: which special tokens and post-processing to set up (see the module docstring).
        num_sentinels: number of ``<extra_id_i>`` tokens (``encoder_decoder`` only).
        length: number of texts in ``texts_iterator``, for the progress bar only.
    """
    named, extra = _family_tokens(family, num_sentinels)
    specials = [*named.values(), *extra]
    if vocab_size <= len(specials):
        raise ValueError(f"vocab_size={vocab_size} leaves no room beside {len(specials)} special tokens")
    if kind == "char":
        tokenizer = _char_backend(texts_iterator, vocab_size, specials, named["unk_token"])
    elif kind == "wordpiece":
        texts = texts_iterator if not isinstance(texts_iterator, Iterator) else list(texts_iterator)
        tokenizer = _wordpiece_backend(texts, vocab_size, specials, named["unk_token"], show_progress, length)
    else:
        tokenizer, trainer = _backend(kind, vocab_size, specials, named["unk_token"], show_progress)
        tokenizer.train_from_iterator(texts_iterator, trainer=trainer, length=length)
    tokenizer.post_processor = _post_processor(family, tokenizer)
    model_input_names = ["input_ids", "token_type_ids", "attention_mask"]
    if family != "encoder":
        model_input_names.remove("token_type_ids")
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        **named,
        extra_special_tokens=extra,
        padding_side="left" if family == "decoder" else "right",
        model_input_names=model_input_names,
        clean_up_tokenization_spaces=False,
    )


class _TextBatches:
    """A dataset's `text_column` in batches, iterable more than once (WordPiece's training reads it twice) without
    holding the texts in memory."""

    def __init__(self, dataset: datasets.Dataset | datasets.IterableDataset, text_column: str, batch_size: int):
        self.dataset, self.text_column, self.batch_size = dataset, text_column, batch_size

    def __iter__(self) -> Iterator[list[str]]:
        for batch in self.dataset.iter(batch_size=self.batch_size):
            yield batch[self.text_column]


def train_tokenizer_on_corpus(
    dataset: datasets.Dataset | datasets.IterableDataset,
    kind: Kind = "bpe",
    vocab_size: int = 8000,
    family: Family = "decoder",
    num_sentinels: int = 100,
    *,
    text_column: str = "text",
    batch_size: int = 1000,
    show_progress: bool = False,
) -> PreTrainedTokenizerFast:
    """:func:`train_tokenizer` on the ``text_column`` of a (streaming or not) dataset."""
    if text_column not in (dataset.column_names or [text_column]):
        raise KeyError(f"no column {text_column!r} in the dataset; columns: {dataset.column_names}")
    length = len(dataset) if isinstance(dataset, datasets.Dataset) else None
    return train_tokenizer(
        _TextBatches(dataset, text_column, batch_size),
        kind,
        vocab_size,
        family,
        num_sentinels,
        length=length,
        show_progress=show_progress,
    )
