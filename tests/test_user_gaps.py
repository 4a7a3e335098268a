"""The gaps a user hits first (issue 37 items 9 and 10): each refused in one line, exit status 2, naming what is
wrong, before any file is written; or, where transformers would manage, managed. Run as users run them, through
`hfzoo <command>`, on tiny real checkpoints and files."""

import json
import shutil

from peft import TaskType
from tests.helpers.cli_runs import refusal
from transformers import AutoModelForSequenceClassification

import hfzoo
from hfzoo.adapters.methods import MethodOptions, apply_method, peft_config_for

FINETUNE = ["finetune", "--task", "sequence-classification", "--max_steps", "1", "--per_device_batch_size", "2"]


def labelled_csv(folder, rows=("a fine film,1", "a dull film,0", "very good,1", "very bad,0")) -> str:
    """A small `text,label` CSV file in `folder`."""
    path = folder / "rows.csv"
    path.write_text("\n".join(["text,label", *rows]) + "\n", encoding="utf-8")
    return str(path)


def test_a_folder_that_needs_its_own_modeling_code_is_refused_without_trust_remote_code(gpt_tiny_checkpoint,
                                                                                       tmp_path, capsys):  # fmt: skip
    """transformers asked on a terminal whether to run the folder's code, or failed in a multi-line traceback."""
    folder = shutil.copytree(gpt_tiny_checkpoint, tmp_path / "custom")
    config = json.loads((folder / "config.json").read_text())
    (folder / "config.json").write_text(json.dumps({**config, "model_type": "someone-elses"}))
    data = labelled_csv(tmp_path)
    line = refusal(capsys, [*FINETUNE, "--model", folder, "--train_file", data, "--validation_file", data,
                            "--output_dir", tmp_path / "out"])  # fmt: skip
    assert f"config key 'model': {folder} needs the modeling code saved with it" in line
    assert "model_type 'someone-elses'" in line and "--trust_remote_code true" in line
    assert not (tmp_path / "out").exists()


def test_a_header_only_csv_is_named(gpt_tiny_checkpoint, tmp_path, capsys):
    """It was counted as "no examples left: 4 for training, 0 for validation", naming no file."""
    header_only = tmp_path / "validation.csv"
    header_only.write_text("text,label\n", encoding="utf-8")
    line = refusal(capsys, [*FINETUNE, "--model", gpt_tiny_checkpoint, "--train_file", labelled_csv(tmp_path),
                            "--validation_file", header_only, "--output_dir", tmp_path / "out"])  # fmt: skip
    assert line == f"finetune: {header_only}: no examples in the file (a header row alone, or blank lines)"


def test_a_corpus_folder_without_training_text_names_the_splits_it_has(tmp_path, capsys):
    """A folder like the shared wikitext2 (valid.txt and test.txt) failed with `KeyError: 'train'`."""
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    for name in ("valid.txt", "test.txt"):
        (corpus / name).write_text("A line of text.\nAnother line.\n", encoding="utf-8")
    line = refusal(capsys, ["pretrain", "--preset", "gpt-tiny", "--objective", "clm", "--dataset", corpus,
                            "--output_dir", tmp_path / "out"])  # fmt: skip
    assert line.startswith(f"pretrain: {corpus}: no training text; its splits are 'test', 'validation'"), line
    assert not (tmp_path / "out").exists()


def test_a_refused_run_leaves_no_training_config(gpt_tiny_checkpoint, tmp_path, capsys):
    """Refusals after the data was read (a max_length past the model's positions; a corpus smaller than one batch)
    left a `training_config.yaml` behind, as if the run had started."""
    data = labelled_csv(tmp_path)
    refusal(capsys, [*FINETUNE, "--model", gpt_tiny_checkpoint, "--train_file", data, "--validation_file", data,
                     "--max_length", 100_000, "--output_dir", tmp_path / "finetune"])  # fmt: skip
    (tmp_path / "corpus.txt").write_text("".join(f"Line {i} of the corpus.\n" for i in range(60)), encoding="utf-8")
    line = refusal(capsys, ["pretrain", "--preset", "gpt-tiny", "--objective", "clm", "--dataset",
                            tmp_path / "corpus.txt", "--vocab_size", 300, "--block_size", 256,
                            "--output_dir", tmp_path / "pretrain"])  # fmt: skip
    assert "fewer than one batch" in line
    assert not (tmp_path / "finetune").exists() and not (tmp_path / "pretrain" / "training_config.yaml").exists()


def test_convert_from_native_names_an_hfzoo_checkpoint_as_one(gpt_tiny_checkpoint, tmp_path, capsys):
    """It said the config's `architectures` "names no a transformers class"."""
    line = refusal(capsys, ["convert", "from-native", gpt_tiny_checkpoint, tmp_path / "out"])
    assert line.startswith(f"convert: {gpt_tiny_checkpoint} is already an hfzoo checkpoint (hfzoo_decoder)")
    assert "hfzoo convert to-native" in line and not (tmp_path / "out").exists()


def test_adapter_config_lists_each_head_to_save_once(tmp_path):
    """PEFT's sequence classifier appends its default head names ("classifier", "score"; "pre_classifier" too since
    PEFT 0.22) to the heads the recipe names: "classifier" was listed twice in adapter_config.json's
    modules_to_save."""
    model = AutoModelForSequenceClassification.from_config(hfzoo.preset_config("bert-tiny", vocab_size=64))
    peft_config = peft_config_for(MethodOptions(method="lora"), TaskType.SEQ_CLS, ["classifier"])
    apply_method(model, peft_config).save_pretrained(tmp_path)
    saved = json.loads((tmp_path / "adapter_config.json").read_text())["modules_to_save"]
    assert len(saved) == len(set(saved)) and {"classifier", "score"} <= set(saved)
