"""Pretraining collators on real text: each objective's promised statistics, with tolerances from the sample size.

Text: WikiText-2 validation paragraphs when the shared data is there, else hfzoo's default corpus
(stdlib docstrings); every tolerance below is computed from the sample it is checked on.
Rates are checked within 5 standard errors of the promised value; the seeds are fixed, so the
tests are deterministic. Run with ``-s`` to see the measured numbers.
"""

import copy
import math
import pickle
import re
from itertools import groupby

import datasets
import pytest
import torch
from accelerate import Accelerator
from tests.helpers.paths import SHARED_DATA
from torch.utils.data import DataLoader

from hfzoo.data.collators import (
    CausalLMCollator, DenoisingCollator, MaskedLMCollator, SpanCorruptionCollator, compute_input_and_target_lengths,
    electra_collator, replaced_token_detection_batch,
)  # fmt: skip
from hfzoo.data.collators.common import ceil_fraction, length_mask, pad, word_index, word_start_table
from hfzoo.data.collators.denoising import apply_spans
from hfzoo.data.collators.spans import lengths_until_budget, place_spans, truncated_geometric
from hfzoo.data.default_corpus import load_default_corpus
from hfzoo.data.packing import pack
from hfzoo.data.tokenizer_training import train_tokenizer

BLOCK = 128
NUM_BLOCKS = 1024  # 131k tokens per statistics test
Z = 5.0  # standard errors allowed


@pytest.fixture(scope="module")
def paragraphs() -> list[str]:
    path = SHARED_DATA / "wikitext2" / "valid.txt"
    if not path.is_file():
        return load_default_corpus("train")["text"][:3000]
    lines = (line.strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line and not line.startswith("=")]


@pytest.fixture(scope="module")
def bert_tokenizer(paragraphs):
    return train_tokenizer(paragraphs, kind="wordpiece", vocab_size=2000, family="encoder")


@pytest.fixture(scope="module")
def t5_tokenizer(paragraphs):
    return train_tokenizer(paragraphs, kind="bpe", vocab_size=2000, family="encoder_decoder", num_sentinels=100)


def packed(tokenizer, texts: list[str], block_size: int, limit: int = NUM_BLOCKS) -> list[dict[str, list[int]]]:
    """The texts joined by EOS/SEP and cut into blocks, as pretraining does (hfzoo.data.packing)."""
    quiet = datasets.utils.are_progress_bars_disabled()
    datasets.disable_progress_bars()
    try:
        blocks = pack(datasets.Dataset.from_dict({"text": texts}), tokenizer, block_size)
    finally:
        if not quiet:
            datasets.enable_progress_bars()
    return [{"input_ids": ids} for ids in blocks["input_ids"][:limit]]


@pytest.fixture(scope="module")
def paragraph_rows(t5_tokenizer, paragraphs):
    """One paragraph per row (at most 256 tokens), no separators inside."""
    rows = t5_tokenizer(paragraphs[:700], add_special_tokens=False)["input_ids"]
    return [{"input_ids": row[:256]} for row in rows if len(row) >= 8]


@pytest.fixture(scope="module")
def bert_blocks(bert_tokenizer, paragraphs):
    """Packed blocks, every third one cut short so batches carry padding."""
    blocks = packed(bert_tokenizer, paragraphs, BLOCK)
    return [{"input_ids": b["input_ids"][: BLOCK - 7 * (i % 13)]} if i % 3 == 0 else b for i, b in enumerate(blocks)]


def batches(collator, examples, size: int = 64):
    return [collator(examples[i : i + size]) for i in range(0, len(examples), size)]


def cat(batch_list, key: str) -> torch.Tensor:
    width = max(b[key].shape[1] for b in batch_list)
    fill = -100 if key == "labels" else 0
    return torch.cat([torch.nn.functional.pad(b[key], (0, width - b[key].shape[1]), value=fill) for b in batch_list])


def assert_rate(successes: int, trials: int, p: float, what: str) -> None:
    tolerance = Z * math.sqrt(p * (1 - p) / trials)
    print(f"{what}: {successes / trials:.4f} (promised {p:.4f} +- {tolerance:.4f}, n={trials})")
    assert abs(successes / trials - p) <= tolerance, what


def structural(tokenizer) -> set[int]:
    """The special ids never masked: all but the unknown token, which stands for a word."""
    return set(tokenizer.all_special_ids) - {tokenizer.unk_token_id}


def words_of(tokenizer, row: list[int]) -> list[list[int]]:
    """Positions of each word, read here independently of the collators: a WordPiece token
    continues a word when it starts with ``##``, a byte-level one when it does not start with ``Ġ``."""
    specials, words = structural(tokenizer), []
    wordpiece = tokenizer.backend_tokenizer.model.__class__.__name__ == "WordPiece"
    for position, (token_id, token) in enumerate(zip(row, tokenizer.convert_ids_to_tokens(row))):
        if token_id in specials:
            continue
        continues = token.startswith("##") if wordpiece else not token.startswith("\u0120")
        if position == 0 or row[position - 1] in specials or not continues:
            words.append([])
        words[-1].append(position)
    return words


def span_count_moments(budget: int, pmf: list[float]) -> tuple[float, float]:
    """Mean and variance of the number of spans drawn until ``budget`` is reached (last one cut).

    N(b) = 1 + N(b - X) if X < b else 1, X ~ pmf (X = 0 repeats the step), by recursion on b.
    """
    mean, square = [0.0] * (budget + 1), [0.0] * (budget + 1)
    for b in range(1, budget + 1):
        s1 = sum(pmf[x] * mean[b - x] for x in range(1, min(b, len(pmf))))
        s2 = sum(pmf[x] * square[b - x] for x in range(1, min(b, len(pmf))))
        mean[b] = (1 + s1) / (1 - pmf[0])
        square[b] = (1 + 2 * (pmf[0] * mean[b] + s1) + s2) / (1 - pmf[0])
    return mean[budget], square[budget] - mean[budget] ** 2


def assert_span_counts(counts: list[int], budgets: list[int], pmf: list[float], what: str) -> None:
    expected = [span_count_moments(b, pmf) for b in budgets]
    mean, var = sum(m for m, _ in expected), sum(v for _, v in expected)
    pmf_mean = sum(i * p for i, p in enumerate(pmf))
    print(f"{what}: {sum(counts)} spans, expected {mean:.1f} +- {Z * math.sqrt(var):.1f}; "
          f"mean span {sum(budgets) / sum(counts):.3f} words (drawn from a pmf of mean {pmf_mean:.3f})")  # fmt: skip
    assert abs(sum(counts) - mean) <= Z * math.sqrt(var), what


def test_causal_lm_labels_are_the_inputs_with_padding_ignored(tokenizer, paragraphs):
    gpt2_style = copy.deepcopy(tokenizer)
    gpt2_style.pad_token = gpt2_style.eos_token  # pads share the EOS id: only positions tell them apart
    rows = [ids + [gpt2_style.eos_token_id] for ids in gpt2_style(paragraphs[:8])["input_ids"]]
    batch = CausalLMCollator(gpt2_style, pad_to_multiple_of=8)([{"input_ids": r} for r in rows])
    assert batch["input_ids"].shape[1] % 8 == 0
    for row, ids, mask, labels in zip(rows, batch["input_ids"], batch["attention_mask"], batch["labels"]):
        assert ids[: len(row)].tolist() == row == labels[: len(row)].tolist()  # EOS keeps its label
        assert mask.tolist() == [1] * len(row) + [0] * (len(mask) - len(row))
        assert (labels[len(row) :] == -100).all()


def test_token_masking_statistics(bert_tokenizer, bert_blocks):
    collator = MaskedLMCollator(bert_tokenizer, generator=torch.Generator().manual_seed(0))
    out = batches(collator, bert_blocks)
    original = cat([{"input_ids": torch.tensor(b["input_ids"])[None]} for b in bert_blocks], "input_ids")
    ids, labels, mask = cat(out, "input_ids"), cat(out, "labels"), cat(out, "attention_mask")
    special = torch.isin(original, torch.tensor(list(structural(bert_tokenizer)))) | (mask == 0)
    chosen = labels != -100
    assert not (chosen & special).any(), "a special token or pad was chosen"
    assert torch.equal(labels[chosen], original[chosen]) and torch.equal(ids[~chosen], original[~chosen])
    n = (~special).sum(1)
    assert torch.equal(chosen.sum(1), (n.double() * 0.15).round().long().clamp(min=1)), "BERT's per-row budget"
    print(f"MLM chosen fraction {chosen.sum() / n.sum():.4f} over {int(n.sum())} tokens")
    vocabulary = len(bert_tokenizer) - len(set(bert_tokenizer.all_special_ids))
    to_mask, kept = ids[chosen] == bert_tokenizer.mask_token_id, ids[chosen] == original[chosen]
    replaced = ids[chosen][~to_mask & ~kept]
    assert not torch.isin(replaced, torch.tensor(bert_tokenizer.all_special_ids)).any()
    trials = int(chosen.sum())
    assert_rate(int(to_mask.sum()), trials, 0.8, "MLM [MASK] share")
    # A random draw hits the original token with probability 1 / vocabulary.
    assert_rate(int(kept.sum()), trials, 0.1 + 0.1 / vocabulary, "MLM unchanged share")
    assert_rate(len(replaced), trials, 0.1 - 0.1 / vocabulary, "MLM random share")


def chosen_words(tokenizer, examples, labels) -> tuple[list[list[list[int]]], list[list[bool]]]:
    """Each row's words and whether each was chosen, asserting that no word is split."""
    all_words, all_chosen = [], []
    for example, row_labels in zip(examples, labels):
        words = words_of(tokenizer, example["input_ids"])
        chosen = [bool(row_labels[w[0]] != -100) for w in words]
        for word, is_chosen in zip(words, chosen):
            assert all(bool(row_labels[p] != -100) == is_chosen for p in word), "a word was split"
        all_words.append(words)
        all_chosen.append(chosen)
    return all_words, all_chosen


def test_whole_word_masking_chooses_every_sub_token_of_a_word(bert_tokenizer, bert_blocks):
    collator = MaskedLMCollator(bert_tokenizer, masking="whole_word", generator=torch.Generator().manual_seed(1))
    examples = bert_blocks[:256]
    labels = cat(batches(collator, examples), "labels")
    words, chosen = chosen_words(bert_tokenizer, examples, labels)
    assert [sum(c) for c in chosen] == [max(1, round(len(w) * 0.15)) for w in words]
    tokens = sum(len(word) for row in words for word in row)
    print(f"whole-word: {int((labels != -100).sum()) / tokens:.4f} of {tokens} tokens chosen")


def test_span_masking_statistics(bert_tokenizer, bert_blocks):
    collator = MaskedLMCollator(bert_tokenizer, masking="span", generator=torch.Generator().manual_seed(2))
    examples = bert_blocks[:512]
    out = batches(collator, examples)
    ids, labels = cat(out, "input_ids"), cat(out, "labels")
    words, chosen = chosen_words(bert_tokenizer, examples, labels)
    budgets = [max(1, round(len(w) * 0.15)) for w in words]
    assert [sum(c) for c in chosen] == budgets
    counts, mixed = [], 0
    for row_words, row_chosen, row_ids in zip(words, chosen, ids):
        runs = [i for i, c in enumerate(row_chosen) if c and (i == 0 or not row_chosen[i - 1])]
        counts.append(len(runs))
        for start in runs:  # SpanBERT: one replacement decision per span
            end = next((i for i in range(start, len(row_words)) if not row_chosen[i]), len(row_words))
            fates = {bool(row_ids[p] == bert_tokenizer.mask_token_id) for w in row_words[start:end] for p in w}
            mixed += len(fates) > 1
    assert mixed == 0, "tokens of one span were replaced differently"
    weights = [0.2 * 0.8 ** (length - 1) for length in range(1, 11)]
    pmf = [0.0] + [w / sum(weights) for w in weights]
    assert abs(sum(i * q for i, q in enumerate(pmf)) - 3.8) < 0.05  # SpanBERT: "mean span length of 3.8"
    assert_span_counts(counts, budgets, pmf, "SpanBERT")


def test_next_sentence_prediction(bert_tokenizer, paragraphs):
    pairs = []
    for document, paragraph in enumerate(paragraphs[:600]):
        sentences = [s for s in re.split(r"(?<=[.!?])\s+", paragraph) if s.strip()]
        encoded = bert_tokenizer(sentences, add_special_tokens=False)["input_ids"]
        pairs += [{"input_ids": a, "next_input_ids": b, "document_id": document} for a, b in zip(encoded, encoded[1:])]
    collator = MaskedLMCollator(
        bert_tokenizer, next_sentence_prediction=True, max_length=64, generator=torch.Generator().manual_seed(3)
    )
    cls, sep = bert_tokenizer.cls_token_id, bert_tokenizer.sep_token_id
    is_random = 0
    for start in range(0, len(pairs), 32):
        group = pairs[start : start + 32]
        batch = collator(group)
        unmasked = torch.where(batch["labels"] != -100, batch["labels"], batch["input_ids"])
        for example, ids, mask, types, label in zip(
            group, unmasked, batch["attention_mask"], batch["token_type_ids"], batch["next_sentence_label"]
        ):
            ids, types = ids[mask.bool()].tolist(), types[mask.bool()].tolist()
            assert len(ids) <= 64 and ids[0] == cls and ids[-1] == sep and ids.count(sep) == 2
            middle = ids.index(sep)
            a, b = ids[1:middle], ids[middle + 1 : -1]
            assert types == [0] * (middle + 1) + [1] * (len(b) + 1)
            assert example["input_ids"][: len(a)] == a
            if label == 0:
                assert example["next_input_ids"][: len(b)] == b, "label 0 but B does not follow A"
            else:
                others = [o["next_input_ids"][: len(b)] for o in group if o["document_id"] != example["document_id"]]
                assert b in others, "label 1 but B is not from another document"
            is_random += int(label)
    assert_rate(is_random, len(pairs), 0.5, "NSP share of random B")


def split_at_sentinels(targets: list[int], sentinels: list[int]) -> dict[int, list[int]]:
    spans = {}
    for token in targets:
        if token in sentinels:
            spans[sentinels.index(token)] = current = []
        else:
            current.append(token)
    return spans


def test_t5_span_corruption(t5_tokenizer, paragraphs):
    assert compute_input_and_target_lengths(512) == (568, 114)  # T5's and transformers' numbers
    tokens_length, targets_length = compute_input_and_target_lengths(BLOCK)
    examples = packed(t5_tokenizer, paragraphs, tokens_length, limit=512)
    full_rows = len(examples)
    examples.append({"input_ids": examples[-1]["input_ids"][:50]})  # a short row: padding, fewer spans
    generator = torch.Generator().manual_seed(4)
    collator = SpanCorruptionCollator(t5_tokenizer, generator=generator, decoder_start_token_id=0)
    sentinels = t5_tokenizer.convert_tokens_to_ids([f"<extra_id_{i}>" for i in range(100)])
    eos, noise, lengths = t5_tokenizer.eos_token_id, 0, []
    for start in range(0, len(examples), 64):
        group = examples[start : start + 64]
        batch = collator(group)
        if start + len(group) <= full_rows:  # only full rows: exactly the wanted lengths
            assert batch["input_ids"].shape[1] == BLOCK and batch["labels"].shape[1] == targets_length
        assert torch.equal(batch["decoder_input_ids"][:, 1:], batch["labels"][:, :-1].clamp(min=0))
        for example, ids, mask, labels in zip(group, batch["input_ids"], batch["attention_mask"], batch["labels"]):
            inputs, targets = ids[mask.bool()].tolist(), labels[labels != -100].tolist()
            assert inputs[-1] == eos and targets[-1] == eos and (labels[len(targets) :] == -100).all()
            used = [t for t in targets if t in sentinels]
            assert used == sentinels[: len(used)] == [t for t in inputs if t in sentinels], "sentinels out of order"
            spans = split_at_sentinels(targets[:-1], sentinels)
            rebuilt = [x for t in inputs[:-1] for x in (spans[sentinels.index(t)] if t in sentinels else [t])]
            assert rebuilt == example["input_ids"], "inputs + targets do not rebuild the original"
            n = len(example["input_ids"])
            assert sum(map(len, spans.values())) == round(n * 0.15) and len(spans) == round(round(n * 0.15) / 3)
            if n == tokens_length:
                noise += round(n * 0.15)
                lengths += [len(s) for s in spans.values()]
    print(f"T5 noise fraction {noise / (full_rows * tokens_length):.4f}, mean span {noise / len(lengths):.3f} tokens")
    # A uniformly random split of n noise tokens into k spans has P(span length = 1) = (k-1)/(n-1).
    n, k = round(tokens_length * 0.15), round(round(tokens_length * 0.15) / 3)
    assert_rate(lengths.count(1), len(lengths), (k - 1) / (n - 1), "T5 share of 1-token spans")


def without(row: list[int], token: int) -> list[int]:
    return [t for t in row if t != token]


def rows_of(batch) -> list[list[int]]:
    return [ids[mask.bool()].tolist() for ids, mask in zip(batch["input_ids"], batch["attention_mask"])]


def test_bart_text_infilling(t5_tokenizer, paragraph_rows):
    collator = DenoisingCollator(t5_tokenizer, permute_sentence_ratio=0.0, generator=torch.Generator().manual_seed(5))
    mask_id, budgets, counts, removed, tokens = t5_tokenizer.mask_token_id, [], [], 0, 0
    for start in range(0, len(paragraph_rows), 64):
        group = paragraph_rows[start : start + 64]
        batch = collator(group)
        originals = torch.tensor([t for ex in group for t in ex["input_ids"]])
        assert torch.equal(batch["labels"][batch["labels"] != -100], originals)
        for example, row in zip(group, rows_of(batch)):
            words = len(words_of(t5_tokenizer, example["input_ids"]))
            budgets.append(-(-words * 3 // 10))  # ceil(0.3 * words), exactly
            assert words - len(words_of(t5_tokenizer, without(row, mask_id))) == budgets[-1], "not whole words"
            counts.append(row.count(mask_id))
            removed += len(example["input_ids"]) - (len(row) - counts[-1])
            tokens += len(example["input_ids"])
    print(f"BART infilling: {removed / tokens:.4f} of {tokens} tokens under a mask")
    pmf = [math.exp(-3) * 3**k / math.factorial(k) for k in range(60)]
    assert_span_counts(counts, budgets, pmf, "BART infilling (one mask per span, 0-length spans insert one)")


def test_spans_are_whole_words_apart_and_each_becomes_one_mask(t5_tokenizer, paragraph_rows):
    rows = [r["input_ids"] for r in paragraph_rows[:128]]
    ids, lengths = pad(rows, t5_tokenizer.pad_token_id)
    maskable = length_mask(lengths, ids.shape[1]) & ~torch.isin(ids, torch.tensor(list(structural(t5_tokenizer))))
    word, num_words = word_index(ids, maskable, word_start_table(t5_tokenizer))
    generator = torch.Generator().manual_seed(6)
    budget = ceil_fraction(num_words, 0.3)
    span_lengths, num_spans = lengths_until_budget(budget, truncated_geometric(0.2, 10), generator)
    span_of_word = place_spans(span_lengths, num_spans, num_words, generator)
    covered_words = span_of_word >= 0
    run_starts = covered_words & ~torch.nn.functional.pad(covered_words[:, :-1], (1, 0), value=False)
    assert torch.equal(covered_words.sum(1), budget) and torch.equal(run_starts.sum(1), num_spans), "spans touch"
    span = torch.where(maskable, span_of_word.gather(1, word.clamp(min=0)), -1)
    mask_id = t5_tokenizer.mask_token_id
    for replace_length in (1, 0, -1):
        masks = torch.full_like(ids, mask_id)
        out, out_lengths = apply_spans(ids, lengths, span, replace_length, masks, t5_tokenizer.pad_token_id)
        results = rows_of({"input_ids": out, "attention_mask": length_mask(out_lengths, out.shape[1])})
        for row, covered, result in zip(rows, (span >= 0).tolist(), results):
            pairs = list(zip(row, covered))
            if replace_length == -1:
                assert result == [mask_id if c else t for t, c in pairs]
            elif replace_length == 0:
                assert result == [t for t, c in pairs if not c]
            else:  # one mask per contiguous covered run: put the runs back in order
                runs = iter([[t for t, _ in run] for c, run in groupby(pairs, key=lambda pair: pair[1]) if c])
                assert [x for t in result for x in (next(runs) if t == mask_id else [t])] == row
                assert next(runs, None) is None


def stop_ids(tokenizer) -> set[int]:
    tokens = tokenizer.convert_ids_to_tokens(range(len(tokenizer)))
    return {i for i, token in enumerate(tokens) if token.removeprefix("\u0120") in (".", "!", "?")}


def sentences_of(tokenizer, row: list[int]) -> list[tuple[int, ...]]:
    stops, sentences, current = stop_ids(tokenizer), [], []
    for position, token in enumerate(row):
        current.append(token)
        if token in stops and (position + 1 == len(row) or row[position + 1] not in stops):
            sentences.append(tuple(current))
            current = []
    return sentences + ([tuple(current)] if current else [])


def test_bart_permutation_rotation_insertion_deletion(t5_tokenizer, paragraph_rows):
    mask_id = t5_tokenizer.mask_token_id
    stops = stop_ids(t5_tokenizer)
    whole = [ex for ex in paragraph_rows if ex["input_ids"][-1] in stops][:256]  # rows of whole sentences
    only = dict(permute_sentence_ratio=0.0, mask_ratio=0.0, generator=torch.Generator().manual_seed(7))

    permuted = rows_of(DenoisingCollator(t5_tokenizer, **{**only, "permute_sentence_ratio": 1.0})(whole))
    unchanged, p_unchanged = 0, []
    for example, row in zip(whole, permuted):
        sentences = sentences_of(t5_tokenizer, example["input_ids"])
        assert sorted(sentences_of(t5_tokenizer, row)) == sorted(sentences), "not a permutation of the sentences"
        unchanged += row == example["input_ids"]
        p_unchanged.append(1 / math.factorial(len(sentences)))  # all S sentences shuffled: 1/S! keep their order
    sigma = math.sqrt(sum(p * (1 - p) for p in p_unchanged))
    expected = sum(p_unchanged)
    print(f"permutation left {unchanged} of {len(whole)} rows in order, expected {expected:.1f} +- {Z * sigma:.1f}")
    assert abs(unchanged - expected) <= Z * sigma

    rotated = rows_of(DenoisingCollator(t5_tokenizer, **{**only, "rotate_ratio": 1.0})(whole))
    offsets, sizes = [], [len(ex["input_ids"]) for ex in whole]
    for example, row in zip(whole, rotated):
        n = len(row)
        offsets.append(next(k for k in range(1, n) if row == example["input_ids"][k:] + example["input_ids"][:k]))
    mean = sum(n / 2 for n in sizes)  # offset uniform on 1..n-1
    sigma = math.sqrt(sum(((n - 1) ** 2 - 1) / 12 for n in sizes))
    print(f"rotation offsets: sum {sum(offsets)}, expected {mean:.0f} +- {Z * sigma:.0f}")
    assert abs(sum(offsets) - mean) <= Z * sigma

    inserted = rows_of(DenoisingCollator(t5_tokenizer, **{**only, "insert_ratio": 0.1})(whole))
    for example, row in zip(whole, inserted):
        assert row.count(mask_id) == -(-len(example["input_ids"]) // 10)  # ceil(0.1 * length)
        assert without(row, mask_id) == example["input_ids"]

    tokens = {**only, "mask_ratio": 0.15, "mask_length": "subword"}
    deleted = rows_of(DenoisingCollator(t5_tokenizer, **tokens, replace_length=0)(whole))
    masked = rows_of(DenoisingCollator(t5_tokenizer, **tokens, replace_length=-1)(whole))
    specials = structural(t5_tokenizer)
    for example, short, same_length in zip(whole, deleted, masked):
        original, n = example["input_ids"], sum(t not in specials for t in example["input_ids"])
        kept = iter(original)
        assert all(t in kept for t in short), "deletion reordered tokens"
        assert len(original) - len(short) == -(-n * 15 // 100) == same_length.count(mask_id)
        assert [t for t in same_length if t != mask_id] == [t for t, u in zip(original, same_length) if u != mask_id]


def test_electra_generator_masking_and_discriminator_labels(bert_tokenizer, bert_blocks):
    generator = torch.Generator().manual_seed(8)
    collator = electra_collator(bert_tokenizer, generator=generator)
    examples = bert_blocks[:512]
    out = batches(collator, examples)
    original = cat([{"input_ids": torch.tensor(b["input_ids"])[None]} for b in examples], "input_ids")
    ids, labels = cat(out, "input_ids"), cat(out, "labels")
    chosen = labels != -100
    masked = ids[chosen] == bert_tokenizer.mask_token_id
    assert_rate(int(masked.sum()), int(chosen.sum()), 0.85, "ELECTRA [MASK] share")
    assert torch.equal(ids[chosen][~masked], original[chosen][~masked]), "ELECTRA draws no random tokens"
    batch = out[0]
    chosen = batch["labels"] != -100
    # Stand-in for the generator's samples: uniform tokens, every fourth masked position sampling its original.
    sampled = torch.randint(len(bert_tokenizer), batch["input_ids"].shape, generator=generator)
    hits = chosen.nonzero()[::4].unbind(1)
    sampled[hits] = batch["labels"][hits]
    discriminator = replaced_token_detection_batch(batch, sampled)
    source = original[: len(sampled), : sampled.shape[1]]
    real = batch["attention_mask"].bool()
    assert torch.equal(discriminator["input_ids"][~chosen & real], source[~chosen & real])
    assert torch.equal(discriminator["input_ids"][chosen], sampled[chosen])
    assert torch.equal(discriminator["labels"][real], (discriminator["input_ids"] != source)[real].long())
    assert (discriminator["labels"][~real] == -100).all() and 0 < discriminator["labels"][real].sum() < chosen.sum()


def test_generator_state_gives_exact_resume(bert_tokenizer, t5_tokenizer, bert_blocks, paragraph_rows, tmp_path):
    every_noise = dict(insert_ratio=0.1, rotate_ratio=0.5, random_ratio=0.1)
    makers = [
        (lambda g: MaskedLMCollator(bert_tokenizer, masking="span", generator=g), bert_blocks[:32]),
        (lambda g: SpanCorruptionCollator(t5_tokenizer, generator=g), paragraph_rows[:32]),
        (lambda g: DenoisingCollator(t5_tokenizer, **every_noise, generator=g), paragraph_rows[:32]),
    ]
    for make, examples in makers:
        collator = make(torch.Generator().manual_seed(9))
        first = collator(examples)
        state = pickle.loads(pickle.dumps(collator.state_dict()))
        second = collator(examples)
        resumed = make(torch.Generator().manual_seed(1234))
        resumed.load_state_dict(state)
        assert all(torch.equal(second[k], v) for k, v in resumed(examples).items())
        assert all(torch.equal(first[k], v) for k, v in make(torch.Generator().manual_seed(9))(examples).items())
        assert not torch.equal(first["input_ids"], second["input_ids"])
    accelerator = Accelerator(cpu=True)
    collator = makers[0][0](torch.Generator().manual_seed(10))
    accelerator.register_for_checkpointing(collator)
    accelerator.save_state(tmp_path / "checkpoint")
    loader = DataLoader(makers[0][1], batch_size=16, collate_fn=collator)
    expected = next(iter(loader))
    accelerator.load_state(tmp_path / "checkpoint")
    assert torch.equal(next(iter(loader))["input_ids"], expected["input_ids"])


def test_word_boundaries_match_the_tokenizers_own_words(bert_tokenizer, tokenizer, docstring_texts):
    """On letters and spaces, every convention (WordPiece ##, byte-level Ġ, Metaspace ▁) gives word_ids()."""
    unigram = train_tokenizer(docstring_texts, kind="unigram", vocab_size=1000, family="encoder_decoder")
    texts = [" ".join(re.findall("[A-Za-z]+", text))[:300] for text in docstring_texts[:50]]
    for tok in (bert_tokenizer, tokenizer, unigram):
        encoding = tok(texts, add_special_tokens=False)
        for i, row in enumerate(encoding["input_ids"]):
            ids = torch.tensor([row])
            ours, _ = word_index(ids, torch.ones_like(ids, dtype=torch.bool), word_start_table(tok))
            theirs = encoding.word_ids(i)
            assert ours[0].tolist() == [w - theirs[0] for w in theirs], type(tok.backend_tokenizer.model).__name__


def test_errors_name_the_problem(bert_tokenizer, t5_tokenizer, tokenizer, paragraph_rows):
    with pytest.raises(ValueError, match="mask_token"):
        MaskedLMCollator(tokenizer)
    with pytest.raises(ValueError, match="masking='spans'; expected one of"):
        MaskedLMCollator(bert_tokenizer, masking="spans")
    with pytest.raises(ValueError, match="mask_replace_prob \\+ random_replace_prob"):
        MaskedLMCollator(bert_tokenizer, mask_replace_prob=0.9, random_replace_prob=0.2)
    with pytest.raises(KeyError, match="next_input_ids"):
        MaskedLMCollator(bert_tokenizer, next_sentence_prediction=True)([{"input_ids": [5, 6]}])
    with pytest.raises(ValueError, match="sentinel tokens <extra_id_0>"):
        SpanCorruptionCollator(tokenizer)
    long_row = [t for ex in paragraph_rows[:40] for t in ex["input_ids"]][:2100]  # 105 spans > 100 sentinels
    with pytest.raises(ValueError, match="105 noise spans but the tokenizer has only 100 sentinels"):
        SpanCorruptionCollator(t5_tokenizer)([{"input_ids": long_row}])
    with pytest.raises(ValueError, match="replace_length must be -1"):
        DenoisingCollator(t5_tokenizer, replace_length=2)
