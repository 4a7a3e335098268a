"""The repository's scripts (benchmarks/, model_cards/: folders that are not packages) as modules, so that a test
calls their `main` in its own process instead of paying a new process's 8-10 s of imports."""

import importlib.util
from types import ModuleType

from tests.helpers.paths import REPO


def load_script(relative_path: str) -> ModuleType:
    """The script at `relative_path` (from the repository root), executed as a module of its file's name."""
    path = REPO / relative_path
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
