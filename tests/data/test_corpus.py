"""Corpus loading from local files (formats, splits, errors naming file and line) and packing."""

import json
import logging

import datasets
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hfzoo.data.corpus import CorpusError, load_corpus
from hfzoo.data.packing import pack, separator_id
from hfzoo.data.tokenizer_training import train_tokenizer

TEXTS = ["First document, with a comma.", "Second: \"quoted\"\tand tabbed", "Ünïcödé → ✓", "last one"]


def _texts(dataset) -> list[str]:
    return [example["text"] for example in dataset]


def _write_all_formats(directory) -> dict[str, object]:
    paths = {fmt: directory / f"corpus.{fmt}" for fmt in ("txt", "jsonl", "csv", "tsv", "parquet")}
    paths["txt"].write_text("\n".join(TEXTS[:2]) + "\n\n   \n" + "\n".join(TEXTS[2:]) + "\n", encoding="utf-8")
    paths["jsonl"].write_text("".join(json.dumps({"id": i, "text": t}) + "\n" for i, t in enumerate(TEXTS)))
    quoted = ['"' + t.replace('"', '""') + '"' for t in TEXTS]
    # A byte-order mark before the text column's name, as Excel writes CSV.
    paths["csv"].write_text("\ufefftext,id\n" + "".join(f"{q},{i}\n" for i, q in enumerate(quoted)), encoding="utf-8")
    paths["tsv"].write_text("id\ttext\n" + "".join(f"{i}\t{q}\n" for i, q in enumerate(quoted)))
    pq.write_table(pa.table({"text": TEXTS, "id": list(range(len(TEXTS)))}), paths["parquet"])
    return paths


@pytest.mark.parametrize("fmt", ["txt", "jsonl", "csv", "tsv", "parquet"])
def test_each_format_loads_the_same_texts_streaming_or_not(tmp_path, fmt):
    path = _write_all_formats(tmp_path)[fmt]
    train = load_corpus(path, split="train", validation_fraction=0.0)
    assert isinstance(train, datasets.Dataset) and train.column_names == ["text"]
    assert train["text"][:] == TEXTS
    streamed = load_corpus(path, split="train", streaming=True, validation_fraction=0.0)
    assert isinstance(streamed, datasets.IterableDataset)
    assert _texts(streamed) == TEXTS


def test_csv_keeps_multiline_fields_and_renames_the_text_column(tmp_path):
    path = tmp_path / "docs.csv"
    path.write_text('title,body\nA,"line one\nline two"\nB,"plain, with comma"\n')
    train = load_corpus(path, text_column="body", split="train", validation_fraction=0.0)
    assert train["text"][:] == ["line one\nline two", "plain, with comma"]


def test_folder_and_data_files_give_named_splits(tmp_path):
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "train-00.txt").write_text("a\nb\n")
    (tmp_path / "sub" / "train-01.jsonl").write_text('{"text": "c"}\n')
    (tmp_path / "valid.txt").write_text("v\n")
    (tmp_path / "test.txt").write_text("t\n")
    (tmp_path / ".hidden.txt").write_text("never\n")
    corpus = load_corpus(tmp_path)
    assert {name: part["text"][:] for name, part in corpus.items()} == {
        "train": ["a", "b", "c"], "validation": ["v"], "test": ["t"]
    }
    corpus = load_corpus(data_files={"train": str(tmp_path / "sub" / "*.txt"), "dev": [tmp_path / "test.txt"]})
    assert {name: part["text"][:] for name, part in corpus.items()} == {"train": ["a", "b"], "validation": ["t"]}


def test_a_missing_validation_split_is_held_out_deterministically(tmp_path, caplog):
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"example number {i}\n" for i in range(400)) + "example number 7\n")
    with caplog.at_level(logging.WARNING, logger="hfzoo.data.corpus"):
        corpus = load_corpus(path)
    assert "no validation split" in caplog.text and "lines.txt" in caplog.text
    train, validation = corpus["train"]["text"][:], corpus["validation"]["text"][:]
    assert 5 <= len(validation) <= 40 and len(train) + len(validation) == 401
    assert set(train).isdisjoint(validation)  # the duplicate "example number 7" stays on one side
    assert load_corpus(path)["validation"]["text"][:] == validation
    assert load_corpus(path, seed=1)["validation"]["text"][:] != validation
    streamed = load_corpus(path, streaming=True)
    assert _texts(streamed["validation"]) == validation and _texts(streamed["train"]) == train


def test_an_edited_file_is_reloaded_not_served_from_cache(tmp_path):
    path = tmp_path / "notes.txt"
    path.write_text("before\n")
    assert load_corpus(path, split="train", validation_fraction=0.0)["text"][:] == ["before"]
    path.write_text("after the edit\n")
    assert load_corpus(path, split="train", validation_fraction=0.0)["text"][:] == ["after the edit"]


def test_other_names_go_to_load_dataset(tmp_path):
    # "json" is a datasets builder, so this takes the Hub path without a network.
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps({"body": f"text {i}", "label": i % 2}) + "\n" for i in range(200)))
    corpus = load_corpus("json", data_files=str(path), text_column="body")
    assert set(corpus) == {"train", "validation"} and corpus["train"].column_names == ["text", "label"]
    texts = [*corpus["train"]["text"], *corpus["validation"]["text"]]
    assert sorted(texts) == sorted(f"text {i}" for i in range(200)) and len(corpus["validation"]) > 0
    with pytest.raises(CorpusError, match="no 'content' column; the columns are: body, label"):
        load_corpus("json", data_files=str(path), text_column="content")
    with pytest.raises(FileNotFoundError, match=r"\./typo/corpus does not exist"):
        load_corpus("./typo/corpus")


def test_default_corpus_is_the_default():
    corpus = load_corpus()
    assert set(corpus) == {"train", "validation"} and "module" in corpus["train"].column_names
    streamed = load_corpus(split="validation", streaming=True)
    assert _texts(streamed.take(20)) == corpus["validation"]["text"][:20]


@pytest.mark.parametrize(
    "name, content, match",
    [
        ("bad.jsonl", b'{"text": "a"}\n{"text": "b"}\n{"text": "c",\n', r"bad\.jsonl, line 3: malformed JSON"),
        ("bad.jsonl", b'{"text": "a"}\n\n{"body": "b", "id": 2}\n', r"bad\.jsonl, line 3: no 'text' column; .*: body, id"),
        ("bad.jsonl", b'{"text": "a"}\n{"text": 5}\n', r"bad\.jsonl, line 2: 'text' is int, not a string"),
        ("bad.jsonl", b'{"text": "a"}\n["text"]\n', r"bad\.jsonl, line 2: expected a JSON object"),
        ("bad.txt", b"ok\nalso ok\nbroken \xff\xfe here\n", r"bad\.txt, line 3: not valid UTF-8 \(byte 0xff at column 8\)"),
        ("bad.csv", b"id,text\n1,ok\n2,caf\xe9\n", r"bad\.csv, line 3: not valid UTF-8"),
        ("bad.csv", b"id,body\n1,ok\n", r"bad\.csv, line 1: no 'text' column; the columns are: id, body"),
        ("bad.csv", b"id,text\n1,ok\n2,too,many\n", r"bad\.csv, line 3: 3 fields, the header has 2"),
        ("bad.tsv", b'text\n"unterminated\n', r"bad\.tsv, line 2: malformed tsv"),
        ("empty.txt", b"", r"empty\.txt: empty corpus"),
        ("blank.jsonl", b'\n{"text": "  "}\n', r"blank\.jsonl: empty corpus"),
    ],
)
def test_malformed_input_names_the_file_and_line(tmp_path, name, content, match):
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(CorpusError, match=match):
        load_corpus(path)
    with pytest.raises(CorpusError, match=match):
        list(load_corpus(path, split="train", streaming=True, validation_fraction=0.0))


def test_bad_paths(tmp_path):
    pq.write_table(pa.table({"body": ["x"]}), tmp_path / "bad.parquet")
    with pytest.raises(CorpusError, match=r"bad\.parquet: no 'text' column; the columns are: body"):
        load_corpus(tmp_path / "bad.parquet")
    (tmp_path / "notes.md").write_text("# notes\n")
    with pytest.raises(CorpusError, match=r"notes\.md: unsupported file type"):
        load_corpus(data_files=[tmp_path / "notes.md"])
    (tmp_path / "nothing-here").mkdir()
    with pytest.raises(CorpusError, match="nothing-here: no corpus files"):
        load_corpus(tmp_path / "nothing-here")
    with pytest.raises(FileNotFoundError, match="missing.jsonl"):
        load_corpus(tmp_path / "missing.jsonl")


# ---------------------------------------------------------------------------------------- packing


@pytest.fixture(scope="module")
def tokenizer():
    texts = load_corpus(split="train").select(range(0, 3000, 3))["text"][:]
    return train_tokenizer(iter(texts), "bpe", vocab_size=600)


@pytest.fixture(scope="module")
def documents():
    return load_corpus(split="validation").select(range(60))


def _stream(tokenizer, texts: list[str], separator: int) -> list[int]:
    ids = []
    for text in texts:
        ids += tokenizer(text, add_special_tokens=False)["input_ids"] + [separator]
    return ids


def test_packed_blocks_are_the_prefix_of_the_token_stream(tokenizer, documents):
    block_size = 64
    packed = pack(documents, tokenizer, block_size, batch_size=16)
    stream = _stream(tokenizer, documents["text"][:], tokenizer.eos_token_id)
    blocks = packed["input_ids"][:]
    assert packed.column_names == ["input_ids"]
    assert len(blocks) == len(stream) // block_size > 10
    assert all(len(block) == block_size for block in blocks)
    assert [t for block in blocks for t in block] == stream[: len(blocks) * block_size]


def test_streaming_packing_equals_packing(tokenizer, documents):
    packed = pack(documents, tokenizer, 50, batch_size=7)
    streamed = pack(documents.to_iterable_dataset(num_shards=1), tokenizer, 50, batch_size=5)
    assert isinstance(streamed, datasets.IterableDataset)
    assert [example["input_ids"] for example in streamed] == packed["input_ids"][:]
    assert streamed.features == packed.features


def test_packing_a_dict_of_splits_and_an_encoder_tokenizer(documents):
    encoder = train_tokenizer(iter(documents["text"][:]), "wordpiece", vocab_size=300, family="encoder")
    assert separator_id(encoder) == encoder.sep_token_id
    corpus = datasets.DatasetDict({"train": documents, "validation": documents.select(range(10))})
    packed = pack(corpus, encoder, 32)
    assert set(packed) == {"train", "validation"}
    stream = _stream(encoder, documents["text"][:10], encoder.sep_token_id)
    blocks = packed["validation"]["input_ids"][:]
    assert [t for block in blocks for t in block] == stream[: len(blocks) * 32]
    assert encoder.cls_token_id not in stream and len(packed["train"]) > len(blocks) > 0
