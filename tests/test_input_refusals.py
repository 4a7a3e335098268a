"""Input that cannot work is refused before any work is done or any file written, naming the key, file or row
(issue 27 item 7): a `max_length` past a RoBERTa's positions, a dataset path that does not exist, a corpus too small
to hold out a validation split, a list where a label belongs. Run as users run them, through `hfzoo <command>`."""

import json

import datasets
import pytest
from tests.helpers.cli_runs import refusal, run
from transformers import RobertaConfig, RobertaForMaskedLM

from hfzoo.training.logging import read_log

CLASSIFY = ["finetune", "--task", "sequence-classification", "--max_steps", "1", "--per_device_batch_size", "4",
            "--max_train_samples", "8", "--max_eval_samples", "4"]  # fmt: skip
PRETRAIN = ["pretrain", "--preset", "gpt-tiny", "--objective", "clm", "--max_steps", "1", "--vocab_size", "300"]


@pytest.fixture
def classification_files(tmp_path, docstring_texts) -> dict[str, str]:
    """train/validation csv of long docstrings (longer than any max_length here) with two labels."""
    files = {}
    for split, texts in (("train", docstring_texts[:16]), ("validation", docstring_texts[16:24])):
        rows = ["text,label", *(json.dumps(" ".join(t.split())) + f",{'ab'[i % 2]}" for i, t in enumerate(texts))]
        (tmp_path / f"{split}.csv").write_text("\n".join(rows) + "\n", encoding="utf-8")
        files[split] = str(tmp_path / f"{split}.csv")
    return files


def test_roberta_max_length_counts_the_positions_before_the_first_token(tmp_path, tokenizer, classification_files,
                                                                        capsys):  # fmt: skip
    """RoBERTa numbers positions from pad_token_id + 1: a table of 34 rows holds 34 - (pad_token_id + 1) tokens.
    One more was accepted and failed at the first long input with an IndexError."""
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=34,
                           pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    RobertaForMaskedLM(config).save_pretrained(tmp_path / "roberta")
    tokenizer.save_pretrained(tmp_path / "roberta")
    limit = 34 - tokenizer.pad_token_id - 1
    data = ["--model", tmp_path / "roberta", "--train_file", classification_files["train"], "--validation_file",
            classification_files["validation"]]  # fmt: skip
    line = refusal(capsys, [*CLASSIFY, *data, "--max_length", limit + 1, "--output_dir", tmp_path / "over"])
    assert f"'max_length' is {limit + 1}" in line and f"max_length <= {limit}" in line and "pad_token_id" in line
    assert not (tmp_path / "over" / "log.jsonl").exists()
    run([*CLASSIFY, *data, "--max_length", limit, "--output_dir", tmp_path / "at-limit"])  # the longest that runs
    assert [r["event"] for r in read_log(tmp_path / "at-limit")][-1] == "end"


@pytest.mark.parametrize("name", ["{tmp}/no-such-folder", "runs/data/no-such-folder", "./sst2", "missing/sst2"])
def test_a_dataset_path_that_does_not_exist_is_named_not_sent_to_the_hub(name, tmp_path, capsys, monkeypatch):
    if name == "missing/sst2" and not datasets.config.HF_HUB_OFFLINE:
        pytest.skip("owner/name may be a Hub dataset: only offline is it certainly missing")
    monkeypatch.chdir(tmp_path)
    name = name.format(tmp=tmp_path)
    line = refusal(capsys, [*CLASSIFY, "--model", "unused", "--dataset", name, "--output_dir", tmp_path / "out"])
    assert line.startswith(f"finetune: {name} does not exist")
    line = refusal(capsys, [*PRETRAIN, "--dataset", name, "--output_dir", tmp_path / "out"])
    assert line.startswith(f"pretrain: {name} does not exist")
    assert not (tmp_path / "out").exists()


def test_a_corpus_too_small_for_a_validation_split_says_so_and_what_to_do(tmp_path, capsys):
    """Three lines: the ~5% held out for validation (by a hash of each text) is none of them."""
    corpus = tmp_path / "tiny.txt"
    corpus.write_text("\n".join(f"line number {i} of a very small corpus with some words" for i in range(3)))
    line = refusal(capsys, [*PRETRAIN, "--dataset", corpus, "--output_dir", tmp_path / "out"])
    assert f"{corpus}: 3 texts are too few" in line and "validation" in line and "data_files" in line
    assert not (tmp_path / "out").exists()


def test_a_list_label_is_refused_naming_its_row(tmp_path, capsys):
    """A JSON list where a label belongs (multi-label data) was read as the label text "['neg']"."""
    rows = [{"text": "good film", "label": "pos"}, {"text": "bad film", "label": ["neg"]}]
    (tmp_path / "train.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    data = ["--train_file", tmp_path / "train.jsonl", "--validation_file", tmp_path / "train.jsonl"]
    line = refusal(capsys, [*CLASSIFY, "--model", "unused", *data, "--output_dir", tmp_path / "out"])
    assert f"{tmp_path / 'train.jsonl'}, line 2: 'label' is" in line and '["neg"]' in line
    assert not (tmp_path / "out").exists()
