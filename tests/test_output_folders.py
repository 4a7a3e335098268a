"""Writes never destroy what hfzoo did not write (issue 27 item 1), and every write is atomic (`hfzoo.core.files`).

`hfzoo convert` replaced its output folder wholesale: converting into a folder holding other files left only the
model files, `to-native X X` on a run folder replaced its 22 entries with 5, `from-native` into its own input lost a
notes file, converting into the current directory deleted it (the source included), and `adapter-to-native A A`
overwrote the adapter and then crashed. `ComposedModel.save_pretrained(existing_dir)` deleted unrelated files too.
Each case here runs on real tiny models in real folders and checks the user's files survive byte for byte.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch
import transformers
from peft import LoraConfig, get_peft_model
from tests.helpers.native_models import native_model

from hfzoo.cli import main as cli
from hfzoo.convert import adapter_to_native, from_native, to_native
from hfzoo.core.files import atomic_path, publish_folder, write_atomic
from hfzoo.core.refusals import Refusal

NOTES = b"my notes: not written by hfzoo\n"


def snapshot(folder: Path) -> dict[str, bytes]:
    """Every file under `folder` (relative path -> bytes)."""
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture
def native_folder(tmp_path, tokenizer) -> Path:
    """A native GPT-2 checkpoint folder with its tokenizer."""
    folder = tmp_path / "native"
    native_model("gpt2", "GPT2LMHeadModel", vocab_size=len(tokenizer)).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def zoo_folder(native_folder, tmp_path) -> Path:
    """The hfzoo checkpoint `from-native` makes of `native_folder`, with the user's notes beside it."""
    cli(["convert", "from-native", str(native_folder), str(tmp_path / "zoo")])
    (tmp_path / "zoo" / "notes.txt").write_bytes(NOTES)
    return tmp_path / "zoo"


# ----------------------------------------------------------------------------------------------- hfzoo convert
def test_a_folder_of_other_files_is_refused_and_overwrite_keeps_them(native_folder, tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_bytes(NOTES)
    (out / "data").mkdir()
    (out / "data" / "train.csv").write_bytes(b"text,label\nhi,1\n")
    before = snapshot(out)
    with pytest.raises(Refusal, match=rf"{out} is not empty.*--overwrite_output_dir"):
        cli(["convert", "from-native", str(native_folder), str(out)])
    assert snapshot(out) == before
    cli(["convert", "from-native", str(native_folder), str(out), "--overwrite_output_dir"])
    after = snapshot(out)
    assert {name: after[name] for name in before} == before
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(out, trust_remote_code=True)
    assert reloaded.config.model_type == "hfzoo_decoder"
    assert not [p for p in out.iterdir() if p.name.startswith(".")]  # no staging left behind


def test_converting_again_into_its_own_output_replaces_only_its_files(native_folder, zoo_folder, tmp_path):
    cli(["convert", "to-native", str(zoo_folder), str(tmp_path / "back")])
    (tmp_path / "back" / "notes.txt").write_bytes(NOTES)
    cli(["convert", "to-native", str(zoo_folder), str(tmp_path / "back")])  # a previous output: no flag needed
    assert (tmp_path / "back" / "notes.txt").read_bytes() == NOTES
    assert transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "back").config.model_type == "gpt2"
    # an earlier output of another command is not this command's: refused
    with pytest.raises(Refusal, match="is not empty"):
        cli(["convert", "from-native", str(native_folder), str(tmp_path / "back")])


@pytest.mark.parametrize("direction", ["to-native", "from-native"])
def test_converting_a_folder_into_itself_or_inside_it_is_refused(direction, native_folder, zoo_folder, tmp_path):
    source = zoo_folder if direction == "to-native" else native_folder
    (source / "log.jsonl").write_bytes(b'{"event": "start"}\n')
    before = snapshot(source)
    for out in (source, source / "native", source.parent):
        with pytest.raises(Refusal, match=rf"{source}.*{out}|{out}.*{source}"):
            cli(["convert", direction, str(source), str(out), "--overwrite_output_dir"])
    assert snapshot(source) == before and not (source / "native").exists()


def test_converting_into_the_current_directory_deletes_nothing(native_folder, tmp_path, monkeypatch):
    work = tmp_path / "work"
    work.mkdir()
    (work / "notes.txt").write_bytes(NOTES)
    monkeypatch.chdir(work)
    with pytest.raises(Refusal, match="is not empty"):
        cli(["convert", "from-native", str(native_folder), "."])
    cli(["convert", "from-native", str(native_folder), ".", "--overwrite_output_dir"])
    assert (work / "notes.txt").read_bytes() == NOTES and (work / "model.safetensors").is_file()
    assert Path.cwd() == work and os.listdir(".")  # the folder itself was never replaced


@pytest.fixture
def adapter_folder(native_folder, tmp_path) -> Path:
    lora = LoraConfig(r=2, target_modules=["o_proj"], init_lora_weights=False)
    zoo = get_peft_model(from_native(native_folder), lora)
    zoo.save_pretrained(tmp_path / "adapter")
    (tmp_path / "adapter" / "notes.txt").write_bytes(NOTES)
    return tmp_path / "adapter"


def test_an_adapter_mapped_onto_itself_is_refused_before_anything_is_written(adapter_folder, native_folder):
    before = snapshot(adapter_folder)
    with pytest.raises(Refusal, match="same folder"):
        cli(["convert", "adapter-to-native", str(adapter_folder), str(adapter_folder), "--base", str(native_folder)])
    with pytest.raises(ValueError, match="same folder"):
        adapter_to_native(adapter_folder, adapter_folder, native_folder, overwrite=True)
    assert snapshot(adapter_folder) == before


def test_an_adapter_into_a_folder_of_other_files_keeps_them(adapter_folder, native_folder, tmp_path):
    out = tmp_path / "mapped"
    out.mkdir()
    (out / "notes.txt").write_bytes(NOTES)
    with pytest.raises(Refusal, match=rf"{out} is not empty"):
        cli(["convert", "adapter-to-native", str(adapter_folder), str(out), "--base", str(native_folder)])
    assert snapshot(out) == {"notes.txt": NOTES}
    cli(["convert", "adapter-to-native", str(adapter_folder), str(out), "--base", str(native_folder),
         "--overwrite_output_dir"])  # fmt: skip
    assert (out / "notes.txt").read_bytes() == NOTES and (out / "adapter_model.safetensors").is_file()
    cli(["convert", "adapter-to-native", str(adapter_folder), str(out), "--base", str(native_folder)])  # again


def test_the_python_api_refuses_a_folder_of_other_files_too(tmp_path, native_folder):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "notes.txt").write_bytes(NOTES)
    zoo = from_native(native_folder)
    with pytest.raises(FileExistsError, match="is not empty"):
        to_native(zoo, out)
    to_native(zoo, out, overwrite=True)
    assert (out / "notes.txt").read_bytes() == NOTES and (out / "config.json").is_file()


# ----------------------------------------------------------------------------------------------- compositions
def test_saving_a_composition_into_an_existing_folder_keeps_other_files(adapter_folder, native_folder, tmp_path):
    from hfzoo.adapters import compose, load_composition

    base = from_native(native_folder)
    composed = compose(base, {"one": adapter_folder, "two": adapter_folder}, "average")
    out = tmp_path / "composition"
    out.mkdir()
    (out / "notes.txt").write_bytes(NOTES)
    composed.save_pretrained(out)
    composed.save_pretrained(out)
    assert (out / "notes.txt").read_bytes() == NOTES
    reloaded = load_composition(from_native(native_folder), out)
    ids = torch.tensor([[5, 6, 7, 8]])
    assert torch.equal(reloaded(input_ids=ids).logits, composed(input_ids=ids).logits)
    # a later save with fewer adapters drops the adapter it no longer has, nothing else
    compose(from_native(native_folder), {"one": adapter_folder}, "average").save_pretrained(out)
    assert sorted(p.name for p in (out / "adapters").iterdir()) == ["one"] and (out / "notes.txt").is_file()


# ----------------------------------------------------------------------------------------------- hfzoo.core.files
def test_a_write_that_fails_leaves_the_old_file_and_no_temporary(tmp_path):
    path = tmp_path / "metrics.json"
    write_atomic(path, '{"accuracy": 1.0}\n')
    with pytest.raises(RuntimeError), atomic_path(path) as temporary:
        temporary.write_text('{"accur')
        raise RuntimeError("killed mid-write")
    assert path.read_text() == '{"accuracy": 1.0}\n' and os.listdir(tmp_path) == ["metrics.json"]


def test_publishing_into_an_existing_folder_replaces_its_files_only(tmp_path):
    final, staging = tmp_path / "out", tmp_path / ".staging"
    final.mkdir()
    (final / "notes.txt").write_bytes(NOTES)
    (final / "model.safetensors").write_bytes(b"old")
    (final / "stale.json").write_bytes(b"old")
    (tmp_path / "outside.txt").write_bytes(NOTES)
    staging.mkdir()
    (staging / "model.safetensors").write_bytes(b"new")
    inode = final.stat().st_ino
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "elsewhere" / "kept.txt").write_bytes(NOTES)
    (final / "link").symlink_to(tmp_path / "elsewhere")
    tampered = ["model.safetensors", "stale.json", "../outside.txt", str(tmp_path / "outside.txt"), "link/kept.txt"]
    publish_folder(staging, final, previous=tampered)
    assert snapshot(final) == {"model.safetensors": b"new", "notes.txt": NOTES}
    assert final.stat().st_ino == inode and not staging.exists()
    assert (tmp_path / "outside.txt").read_bytes() == NOTES  # a previous-files list never reaches outside
    assert (tmp_path / "elsewhere" / "kept.txt").read_bytes() == NOTES
