"""Pushing a saved folder to the Hub the way transformers' `save_pretrained(push_to_hub=True)` does, for the
folders hfzoo writes itself (a composition): create the repository before the save, so that a bad token or name, or
offline mode (`HF_HUB_OFFLINE=1`, which `huggingface_hub` refuses naming it), fails before any work; then, once the
folder is saved whole, upload it in one commit. Only `huggingface_hub`'s public `HfApi` is used; `api` takes any
object with its `create_repo` and `upload_folder`, so everything up to the network can be checked offline.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from huggingface_hub import HfApi


@dataclass(frozen=True)
class HubUpload:
    """A Hub repository made ready for a folder (`prepare_upload`): where the saved folder goes, and with what."""

    api: Any  # an `HfApi`, or an object with its `upload_folder`
    repo_id: str
    token: str | bool | None
    commit_message: str

    def upload(self, folder: str | os.PathLike) -> Any:
        """Upload every file of `folder` (saved whole) to the repository in one commit; returns the commit info."""
        return self.api.upload_folder(
            repo_id=self.repo_id, folder_path=os.fspath(folder), commit_message=self.commit_message, token=self.token
        )


def prepare_upload(
    folder: str | os.PathLike,
    push_to_hub: bool = True,
    repo_id: str | None = None,
    *,
    token: str | bool | None = None,
    private: bool | None = None,
    commit_message: str = "Upload composition",
    api: Any = None,
) -> HubUpload | None:
    """Create (or find) the Hub repository `repo_id` (default: the name of `folder`, as transformers names it) before
    anything is saved; `private` applies to a new repository only. Without `push_to_hub` nothing is created (None),
    and a Hub option is refused rather than ignored."""
    if not push_to_hub:
        given = {"repo_id": repo_id, "token": token, "private": private, "api": api}
        if any(value is not None for value in given.values()):
            named = ", ".join(key for key, value in given.items() if value is not None)
            raise ValueError(f"{named}: Hub options without push_to_hub=True; pass push_to_hub=True to upload")
        return None
    api = HfApi() if api is None else api
    url = api.create_repo(repo_id or Path(folder).name, token=token, private=private, exist_ok=True)
    return HubUpload(api, url.repo_id, token, commit_message)
