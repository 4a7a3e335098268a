"""Sharing on the Hub: `ComposedModel.save_pretrained(path, push_to_hub=True, repo_id=..., token=..., private=...)`,
as transformers offers it for models (hfzoo's models push through `PreTrainedModel`). The upload needs a token and
the network, so it is not run here: an object with `HfApi`'s `create_repo` and `upload_folder` stands in for the Hub
and checks, when the upload is called, that the folder is complete and loads; and with `HF_HUB_OFFLINE=1` the real
`HfApi` refuses before anything is written.
"""

from pathlib import Path

import huggingface_hub
import pytest
import torch
from huggingface_hub import RepoUrl
from huggingface_hub.errors import OfflineModeIsEnabled
from tests.helpers.llama_adapters import causal_base

from hfzoo.adapters import compose, load_composition

SAVED_FILES = [
    "adapters/asyncio/adapter_config.json", "adapters/asyncio/adapter_model.safetensors",
    "adapters/email/adapter_config.json", "adapters/email/adapter_model.safetensors",
    "adapters/logging/adapter_config.json", "adapters/logging/adapter_model.safetensors",
    "composition.json", "composition.safetensors",
]  # fmt: skip


class RecordingHub:
    """The two `HfApi` calls a push makes, recorded. Like the Hub, a repository named without an owner is created
    under the token's user (`me`). At the upload the folder is read as the repository's user will read it."""

    def __init__(self, base):
        self.base, self.calls = base, []

    def create_repo(self, repo_id, *, token=None, private=None, exist_ok=False):
        self.calls.append(("create_repo", repo_id, token, private, exist_ok))
        return RepoUrl(f"https://huggingface.co/{repo_id if '/' in repo_id else f'me/{repo_id}'}")

    def upload_folder(self, *, repo_id, folder_path, commit_message, token):
        files = sorted(path.relative_to(folder_path).as_posix() for path in Path(folder_path).rglob("*")
                       if path.is_file())  # fmt: skip
        self.calls.append(("upload_folder", repo_id, folder_path, commit_message, token, files))
        self.uploaded = load_composition(self.base, folder_path)


def soft_composition(setup):
    composed = compose(causal_base(setup), setup.folders, "soft")
    for layer in composed.composed_layers.values():  # routers away from their zero start, so the weights matter
        torch.nn.init.normal_(layer.combiner.proj.weight, std=0.5, generator=torch.Generator().manual_seed(0))
    return composed


def test_push_creates_the_repository_first_then_uploads_the_whole_saved_folder(setup, tmp_path):
    composed, folder = soft_composition(setup), tmp_path / "composition"
    hub = RecordingHub(causal_base(setup))
    composed.save_pretrained(folder, push_to_hub=True, repo_id="someone/mix", token="hf_token", private=True, api=hub)
    assert hub.calls[0] == ("create_repo", "someone/mix", "hf_token", True, True)
    assert hub.calls[1] == ("upload_folder", "someone/mix", str(folder), "Upload composition", "hf_token", SAVED_FILES)
    batch = setup.encode(setup.texts["email"][:2])
    assert torch.equal(hub.uploaded(**batch).logits, composed(**batch).logits)  # what was uploaded is the composition


def test_the_repository_is_named_after_the_folder_and_the_hub_gives_its_owner(setup, tmp_path):
    hub = RecordingHub(causal_base(setup))
    soft_composition(setup).save_pretrained(tmp_path / "my-mix", push_to_hub=True, commit_message="v1", api=hub)
    assert hub.calls[0][1] == "my-mix" and hub.calls[1][1:4] == ("me/my-mix", str(tmp_path / "my-mix"), "v1")


def test_offline_mode_is_named_before_anything_is_written(setup, tmp_path, monkeypatch):
    """The real `HfApi`: with HF_HUB_OFFLINE=1 creating the repository is refused, naming the switch, before the
    composition is saved (as transformers creates the repository before it saves)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OfflineModeIsEnabled, match="HF_HUB_OFFLINE"):
        soft_composition(setup).save_pretrained(tmp_path / "mix", push_to_hub=True, repo_id="someone/mix", token="x")
    assert list(tmp_path.iterdir()) == []


def test_hub_options_without_push_to_hub_are_refused(setup, tmp_path):
    with pytest.raises(ValueError, match="repo_id, private: Hub options without push_to_hub=True"):
        soft_composition(setup).save_pretrained(tmp_path / "mix", repo_id="someone/mix", private=True)
    assert list(tmp_path.iterdir()) == []


def test_an_hfzoo_model_pushes_through_transformers_which_refuses_offline_before_writing(tiny_model, tmp_path,
                                                                                        monkeypatch):  # fmt: skip
    """hfzoo's models inherit transformers' push: with HF_HUB_OFFLINE=1 it names the switch and writes no file."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(OfflineModeIsEnabled, match="HF_HUB_OFFLINE"):
        tiny_model("gpt-tiny").save_pretrained(tmp_path / "gpt", push_to_hub=True, repo_id="someone/gpt", token="x")
    assert [path for path in tmp_path.rglob("*") if path.is_file()] == []  # (transformers made the empty folder)
