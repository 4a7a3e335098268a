"""Fine-tuning inputs, laid out per model family on REAL rows of the shared data sets, and malformed-data errors.

Decoder: `bos a delim b eos` (GPT); encoder: `[CLS] a [SEP] b [SEP]` with token types (BERT); encoder-decoder: T5's
text-to-text prefix and label words. CoNLL labels sit on first sub-tokens; SQuAD windows carry the answer's tokens
and the post-processing recovers it; seq2seq puts the loss on the target only. Tiny hfzoo checkpoints (random
weights, tokenizers trained here on the same data) are built once per session and shared with
test_finetune_recipe.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from tests.helpers.paths import REPO, SHARED_DATA as DATA
from tests.helpers.tiny_checkpoints import first_lines
from transformers import AutoTokenizer

from hfzoo.commands.finetune import main, parse_args
from hfzoo.tasks import QuestionAnswering, Seq2Seq, SequenceClassification, TokenClassification, load_examples
from hfzoo.tasks.records import DataError
from hfzoo.training.task_model import load_model, load_tokenizer


def task_for(checkpoint: Path, *args: str):
    """(task, train, validation) bound to `checkpoint`'s tokenizer and family, as the recipe prepares them."""
    config = parse_args(["--model", str(checkpoint), *args]).data  # what to train, on which data, formatted how
    task = {c.name: c for c in (SequenceClassification, TokenClassification, QuestionAnswering, Seq2Seq)}[config.task]
    task = task(config)
    train, validation = load_examples(task, config)
    task.fit_labels(train, validation)
    tokenizer = AutoTokenizer.from_pretrained(checkpoint)
    family = {"gpt-tiny": "decoder", "bert-tiny": "encoder", "t5-tiny": "encoder_decoder"}[checkpoint.name]
    task.bind(tokenizer, family)
    return task, train, validation


RTE = ["--task", "sequence-classification", "--dataset", str(DATA / "rte"), "--text_column", "sentence1",
       "--text_pair_column", "sentence2", "--max_train_samples", "40", "--max_eval_samples", "12"]  # fmt: skip


def _file_label(where: str) -> str:
    """The label column of the TSV line an example says it came from, read straight from the file."""
    path, line = where.rsplit(", line ", 1)
    return Path(path).read_text(encoding="utf-8").splitlines()[int(line) - 1].split("\t")[-1]


# ------------------------------------------------------------------------------------------ sequence classification
def test_decoder_pair_layout_is_bos_premise_delim_hypothesis_eos(checkpoints):
    task, _, validation = task_for(checkpoints["gpt-tiny"], *RTE, "--max_length", "512")
    tokenizer = task.tokenizer
    assert task.labels == ["entailment", "not_entailment"]
    for example, feature in zip(validation, task.encode(validation, training=False)):
        a = tokenizer(example.text, add_special_tokens=False)["input_ids"]
        b = tokenizer(example.pair, add_special_tokens=False)["input_ids"]
        # No sep token in hfzoo's decoder tokenizer: eos delimits (and ends), as documented in gpt_input_ids.
        assert feature["input_ids"] == [tokenizer.bos_token_id, *a, tokenizer.eos_token_id, *b, tokenizer.eos_token_id]
        assert feature["attention_mask"] == [1] * len(feature["input_ids"])
        assert task.labels[feature["labels"]] == example.label == _file_label(example.where)


def test_decoder_classifier_pools_the_final_eos_of_each_padded_row(checkpoints):
    """The head reads each row's last real token: padded batches give the logits of each row alone."""
    task, _, validation = task_for(checkpoints["gpt-tiny"], *RTE)
    config = task.config
    model, family, missing = load_model(config, task, load_tokenizer(config))
    assert family == "decoder" and missing == ["score.weight"]
    assert model.config.pad_token_id == task.tokenizer.pad_token_id is not None
    features = task.encode(validation[:4], training=False)
    assert len({len(f["input_ids"]) for f in features}) > 1  # real padding in the batch
    batch = {k: v for k, v in task.collate(features).items() if k != "labels"}
    with torch.no_grad():
        batched = model.eval()(**batch).logits
        alone = torch.cat([model(input_ids=torch.tensor([f["input_ids"]])).logits for f in features])
    torch.testing.assert_close(batched, alone, rtol=1e-5, atol=1e-5)


def test_encoder_pair_layout_is_cls_a_sep_b_sep_with_token_types(checkpoints):
    task, _, validation = task_for(checkpoints["bert-tiny"], *RTE, "--max_length", "512")
    tokenizer = task.tokenizer
    for example, feature in zip(validation, task.encode(validation, training=False)):
        a = tokenizer(example.text, add_special_tokens=False)["input_ids"]
        b = tokenizer(example.pair, add_special_tokens=False)["input_ids"]
        cls, sep = tokenizer.cls_token_id, tokenizer.sep_token_id
        assert feature["input_ids"] == [cls, *a, sep, *b, sep]
        assert feature["token_type_ids"] == [0] * (len(a) + 2) + [1] * (len(b) + 1)
        assert task.labels[feature["labels"]] == _file_label(example.where)


def test_encoder_truncates_pairs_to_max_length(checkpoints):
    task, _, validation = task_for(checkpoints["bert-tiny"], *RTE, "--max_length", "24")
    features = task.encode(validation, training=False)
    assert max(len(f["input_ids"]) for f in features) == 24
    assert all(f["input_ids"].count(task.tokenizer.sep_token_id) == 2 for f in features)  # both texts kept


def test_text_to_text_layout_has_t5_prefix_and_label_words(checkpoints):
    task, _, validation = task_for(checkpoints["t5-tiny"], *RTE, "--task_prefix", "rte", "--max_length", "512")
    tokenizer = task.tokenizer
    for example, feature in zip(validation, task.encode(validation, training=True)):
        source = f"rte sentence1: {example.text.strip()} sentence2: {example.pair.strip()}"
        assert feature["input_ids"] == tokenizer(source)["input_ids"]
        assert feature["input_ids"][-1] == tokenizer.eos_token_id
        target = tokenizer.decode(feature["labels"], skip_special_tokens=True)
        assert target == _file_label(example.where)  # RTE's labels are words already
        assert feature["labels"][-1] == tokenizer.eos_token_id


def test_text_to_text_label_words_map_numeric_labels(checkpoints):
    task, _, validation = task_for(
        checkpoints["t5-tiny"], "--task", "sequence-classification", "--dataset", str(DATA / "sst2"),
        "--text_column", "sentence", "--task_prefix", "sst2", "--label_words", "{0: negative, 1: positive}",
        "--max_train_samples", "50", "--max_eval_samples", "10",
    )  # fmt: skip
    assert task.labels == ["0", "1"] and task.words == ["negative", "positive"]
    features = task.encode(validation, training=True)
    for example, feature in zip(validation, features):
        assert task.tokenizer.decode(feature["input_ids"], skip_special_tokens=True).startswith("sst2 sentence: ")
        expected = {"0": "negative", "1": "positive"}[_file_label(example.where)]
        assert task.tokenizer.decode(feature["labels"], skip_special_tokens=True) == expected
    # Scoring by generation: label words map back to labels, anything else is a wrong answer.
    outputs = [task.words[task.labels.index(e.label)] for e in validation[:-1]] + ["neutral"]
    metrics, records = task.finish(validation, features, outputs)
    assert metrics["accuracy"] == pytest.approx((len(validation) - 1) / len(validation))
    assert records[-1]["prediction"] is None and records[0]["prediction"] == validation[0].label


# ------------------------------------------------------------------------------------------ token classification
def test_conll_reader_skips_docstart_and_counts_the_real_sentences(checkpoints):
    task, train, validation = task_for(
        checkpoints["bert-tiny"], "--task", "token-classification", "--dataset", str(DATA / "conll2003")
    )
    assert len(validation) == 3250 and sum(len(s.tokens) for s in validation) == 51362  # the README's counts
    assert not any("-DOCSTART-" in s.tokens for s in train[:500])
    assert task.labels == sorted(["O", "B-PER", "I-PER", "B-ORG", "I-ORG", "B-LOC", "I-LOC", "B-MISC", "I-MISC"])


@pytest.mark.parametrize("preset", ["bert-tiny", "gpt-tiny"])
def test_conll_labels_sit_on_first_subtokens(checkpoints, preset):
    task, _, validation = task_for(
        checkpoints[preset], "--task", "token-classification", "--dataset", str(DATA / "conll2003"),
        "--max_eval_samples", "60",
    )  # fmt: skip
    features = task.encode(validation, training=False)
    split_words = 0
    for sentence, feature in zip(validation, features):
        labelled = [(i, label) for i, label in enumerate(feature["labels"]) if label != -100]
        assert [task.labels[label] for _, label in labelled] == sentence.tags  # one label per word, in order
        for word, (position, _) in enumerate(labelled):
            assert feature["word_ids"][position] == word
            assert position == 0 or feature["word_ids"][position - 1] != word  # the FIRST sub-token
        split_words += sum(1 for w in set(feature["word_ids"]) if w is not None and feature["word_ids"].count(w) > 1)
        if preset == "bert-tiny":
            assert feature["input_ids"][0] == task.tokenizer.cls_token_id and feature["labels"][0] == -100
    assert split_words > 0  # the test saw words of several sub-tokens
    # Perfect per-token outputs give seqeval F1 1: labels and predictions map back to the same words.
    metrics, _ = task.finish(validation, features, [[max(label, 0) for label in f["labels"]] for f in features])
    assert metrics["f1"] == 1.0 and metrics["accuracy"] == 1.0


# ------------------------------------------------------------------------------------------ question answering
def test_squad_windows_carry_the_answer_and_postprocessing_recovers_it(checkpoints):
    task, _, _ = task_for(
        checkpoints["bert-tiny"], "--task", "question-answering", "--train_file", str(DATA / "squad" / "dev-v1.1.json"),
        "--validation_split", "0.1", "--max_length", "96", "--doc_stride", "32",
    )  # fmt: skip
    examples = task.read(task.config.train_file)
    assert len(examples) == 10570  # every question of the dev set passed the answer check
    examples = examples[:150]
    train, evaluation = task.encode(examples, training=True), task.encode(examples, training=False)
    assert len(train) == len(evaluation) > 2 * len(examples)  # long contexts became several windows
    outputs = []
    for window, feature in zip(train, evaluation):
        example = examples[feature["example_index"]]
        start, end = window["start_positions"], window["end_positions"]
        if start:  # a window holding the answer: its tokens cover exactly the answer's characters
            covered = example.context[feature["offsets"][start][0] : feature["offsets"][end][1]]
            assert example.answers[0]["text"] in covered and len(covered) - len(example.answers[0]["text"]) < 8
        logits = np.zeros((2, len(feature["input_ids"])))
        logits[0, start], logits[1, end] = 10.0, 10.0
        outputs.append((logits[0], logits[1]))
    metrics, records = task.finish(examples, evaluation, outputs)
    assert metrics["exact_match"] >= 95.0  # misses: answers inside a token ("8" of "18"), answers over 30 tokens
    assert [r["id"] for r in records] == [e.id for e in examples]


# ------------------------------------------------------------------------------------------ seq2seq
MULTI30K = ["--task", "seq2seq", "--dataset", str(DATA / "multi30k"), "--text_column", "en", "--target_column", "de",
            "--max_train_samples", "20", "--max_eval_samples", "5"]  # fmt: skip


def test_seq2seq_reads_parallel_files_line_by_line(checkpoints):
    task, train, validation = task_for(checkpoints["t5-tiny"], *MULTI30K, "--task_prefix", "translate English to German:")
    assert train[0].source == first_lines(DATA / "multi30k" / "train.en", 1)[0]
    assert train[0].target == first_lines(DATA / "multi30k" / "train.de", 1)[0]
    assert validation[4].target == first_lines(DATA / "multi30k" / "val.de", 5)[4]
    for example, feature in zip(train, task.encode(train, training=True)):
        assert feature["input_ids"] == task.tokenizer(f"translate English to German: {example.source}")["input_ids"]
        assert task.tokenizer.decode(feature["labels"], skip_special_tokens=True) == example.target


def test_decoder_seq2seq_trains_on_the_target_only_and_prompts_with_the_source(checkpoints):
    task, train, _ = task_for(checkpoints["gpt-tiny"], *MULTI30K)
    tokenizer = task.tokenizer
    for example, feature, prompt in zip(train, task.encode(train, True), task.encode(train, False)):
        source = tokenizer(example.source, add_special_tokens=False)["input_ids"]
        target = tokenizer(example.target, add_special_tokens=False)["input_ids"]
        assert prompt["input_ids"] == [tokenizer.bos_token_id, *source, tokenizer.eos_token_id]
        assert feature["input_ids"] == prompt["input_ids"] + target + [tokenizer.eos_token_id]
        assert feature["labels"] == [-100] * len(prompt["input_ids"]) + target + [tokenizer.eos_token_id]
    batch = task.collate(task.encode(train[:3], False))  # prompts pad on the left for generation
    assert (batch["input_ids"][:, -1] == tokenizer.eos_token_id).all()


def test_hub_rows_get_their_class_label_names_back(tmp_path):
    """Hub datasets store labels as ClassLabel ids; the tasks see the names (a parquet folder keeps the features)."""
    import datasets

    from hfzoo.tasks.records import hub_records

    features = datasets.Features({
        "tokens": datasets.Sequence(datasets.Value("string")),
        "ner_tags": datasets.Sequence(datasets.ClassLabel(names=["O", "B-PER", "I-PER"])),
        "label": datasets.ClassLabel(names=["negative", "positive"]),
    })  # fmt: skip
    rows = {"tokens": [["Ada", "Lovelace", "wrote"]], "ner_tags": [[1, 2, 0]], "label": [1]}
    datasets.Dataset.from_dict(rows, features=features).to_parquet(str(tmp_path / "train.parquet"))
    records = hub_records(str(tmp_path), None, "train")
    assert records == [(f"{tmp_path}[train] row 0", {"tokens": ["Ada", "Lovelace", "wrote"],
                                                      "ner_tags": ["B-PER", "I-PER", "O"], "label": "positive"})]
    assert hub_records(str(tmp_path), None, "validation") is None


# ------------------------------------------------------------------------------------------ malformed data
def _run(*args: str):
    """The recipe as users run it; data is read before any model loads, so `--model` need not exist."""
    try:
        return main(["--model", "unused", "--max_steps", "1", *args])
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)


def _copy_lines(source: Path, target: Path, count: int, edit=lambda lines: lines) -> Path:
    target.write_text("\n".join(edit(first_lines(source, count))) + "\n", encoding="utf-8")
    return target


@pytest.fixture
def sst2_files(tmp_path):
    if not DATA.is_dir():
        pytest.skip(f"shared data sets not found at {DATA}")
    train = _copy_lines(DATA / "sst2" / "train.tsv", tmp_path / "train.tsv", 30)
    return train, tmp_path


def test_missing_column_names_file_and_line(sst2_files):
    train, tmp = sst2_files
    validation = _copy_lines(DATA / "sst2" / "dev.tsv", tmp / "dev.tsv", 5)
    with pytest.raises(DataError, match=rf"{train}, line 2: no 'text' column; the columns are: sentence, label"):
        _run("--task", "sequence-classification", "--train_file", str(train), "--validation_file", str(validation))


def test_unknown_validation_label_names_file_and_line(sst2_files):
    train, tmp = sst2_files
    validation = _copy_lines(DATA / "sst2" / "dev.tsv", tmp / "dev.tsv", 6, lambda ls: ls[:4] + [ls[4][:-1] + "2"])
    with pytest.raises(DataError, match=rf"{validation}, line 5: label '2' does not occur in the training data"):
        _run("--task", "sequence-classification", "--train_file", str(train), "--validation_file", str(validation),
             "--text_column", "sentence")  # fmt: skip


def test_empty_text_names_file_and_line(sst2_files):
    train, tmp = sst2_files
    validation = _copy_lines(DATA / "sst2" / "dev.tsv", tmp / "dev.tsv", 6, lambda ls: ls[:3] + [" \t1"] + ls[4:])
    with pytest.raises(DataError, match=rf"{validation}, line 4: 'sentence' is empty"):
        _run("--task", "sequence-classification", "--train_file", str(train), "--validation_file", str(validation),
             "--text_column", "sentence")  # fmt: skip


def test_conll_line_with_wrong_field_count_names_file_and_line(tmp_path):
    if not DATA.is_dir():
        pytest.skip(f"shared data sets not found at {DATA}")
    train = _copy_lines(DATA / "conll2003" / "train.txt", tmp_path / "train.txt", 40,
                        lambda ls: ls[:20] + [ls[20].rsplit(" ", 1)[0]] + ls[21:])  # fmt: skip
    with pytest.raises(DataError, match=rf"{train}, line 21: 3 fields, but the file's lines have 4"):
        _run("--task", "token-classification", "--train_file", str(train), "--validation_split", "0.5")


def test_squad_answer_not_in_context_names_the_question_id(tmp_path):
    if not DATA.is_dir():
        pytest.skip(f"shared data sets not found at {DATA}")
    squad = json.loads((DATA / "squad" / "dev-v1.1.json").read_text(encoding="utf-8"))
    article = squad["data"][0]
    question = article["paragraphs"][1]["qas"][2]
    question["answers"][0]["answer_start"] += 3  # the text is no longer where the offset says
    path = tmp_path / "squad.json"
    path.write_text(json.dumps({"version": "1.1", "data": [article]}), encoding="utf-8")
    with pytest.raises(DataError, match=rf"{path}, question id {question['id']}: answer .* is not in its context"):
        _run("--task", "question-answering", "--train_file", str(path), "--validation_split", "0.5")


# ------------------------------------------------------------------------------------------ configuration
@pytest.mark.parametrize(
    "args, message",
    [
        (["--task", "seq2seq", "--train_file", "x.tsv", "--metod", "lora"], "unknown config key 'metod'. Did you mean 'method'"),
        (["--task", "ner", "--train_file", "x.tsv"], "config key 'task': unknown value 'ner'"),
        (["--task", "seq2seq"], "give a data source"),
        (["--task", "seq2seq", "--train_file", "x.tsv", "--method", "dora"], "unknown value 'dora'. Valid methods"),
    ],
)
def test_config_mistakes_stop_before_anything_runs(args, message):
    with pytest.raises(SystemExit, match=message):
        main(["--model", "unused", *args])


def test_shipped_configs_parse():
    configs = sorted((REPO / "recipes" / "configs" / "finetune").glob("*.yaml"))
    assert {c.stem for c in configs} >= {"sst2", "rte", "conll2003", "squad", "multi30k", "sst2-native-bert"}
    for path in configs:
        config = parse_args(["--config", str(path)])
        assert config.data.model and config.data.task


def test_a_seeded_training_subset_is_drawn_from_the_whole_file_in_file_order(checkpoints):
    _, first, _ = task_for(checkpoints["bert-tiny"], *RTE)
    _, drawn, _ = task_for(checkpoints["bert-tiny"], *RTE, "--train_subset_seed", "0")
    _, again, _ = task_for(checkpoints["bert-tiny"], *RTE, "--train_subset_seed", "0", "--seed", "7")
    _, other, _ = task_for(checkpoints["bert-tiny"], *RTE, "--train_subset_seed", "1")
    _, whole, _ = task_for(checkpoints["bert-tiny"], *RTE[:-4])
    lines = [int(example.where.rsplit(", line ", 1)[1]) for example in drawn]
    assert len(drawn) == 40 and lines == sorted(lines) and max(lines) > 200  # not the file's first 40
    assert [e.where for e in again] == [e.where for e in drawn] != [e.where for e in other]
    assert {e.where for e in drawn} <= {e.where for e in whole} and drawn != first
    with pytest.raises(ValueError, match="'train_subset_seed' draws the max_train_samples .* give --max_train_samples"):
        parse_args(["--model", "m", *RTE[:-4], "--train_subset_seed", "0"])
