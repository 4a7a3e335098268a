"""hfzoo's packages import downwards only, so a change low in the stack never has to climb back up.

Layers, lowest first. A module may import from its own layer or a lower one:
1. `models/`: saved next to every checkpoint, so it imports only its flat siblings (`from .x import y`).
2. presets, registration, metrics, the recipe config machinery, files (atomic writes, output folders).
3. data, adapters and features (which reach models only through transformers/PEFT), cards, convert (hfzoo <->
   native transformers weights).
4. tasks (fine-tuning tasks and their data).
5. training (what the recipes share: loop, checkpointing, logging, objectives).
6. the recipes, quickstart, the CLI, and the package's `__init__`.
"""

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hfzoo"
LAYERS = (
    {"models"},
    {"presets", "registration", "metrics", "recipe_config", "files"},
    {"data", "adapters", "features", "cards", "convert"},
    {"tasks"},
    {"training"},
    {"recipes", "quickstart", "cli", "__init__"},
)
LAYER_OF = {name: depth for depth, names in enumerate(LAYERS) for name in names}
SOURCES = sorted(PACKAGE.rglob("*.py"))


def _top(path: Path) -> str:
    """The first component below hfzoo/ (a package name, or a module's stem)."""
    parts = path.relative_to(PACKAGE).parts
    return parts[0] if len(parts) > 1 else Path(parts[0]).stem


def _imported(path: Path, node: ast.ImportFrom | ast.Import) -> list[str]:
    """The hfzoo top-level names a statement imports from (empty for third-party imports)."""
    if isinstance(node, ast.Import):
        return [alias.name.split(".")[1] for alias in node.names if alias.name.startswith("hfzoo.")]
    if node.level == 0:
        module = node.module or ""
        if module == "hfzoo":
            return [alias.name for alias in node.names]
        return [module.split(".")[1]] if module.startswith("hfzoo.") else []
    package = path.relative_to(PACKAGE).parent.parts[: len(path.relative_to(PACKAGE).parent.parts) - (node.level - 1)]
    target = [*package, *(node.module.split(".") if node.module else [])]
    return [target[0]] if target else [alias.name for alias in node.names]


def _statements(path: Path):
    """Every import statement, module-level or inside functions (a lazy import is still a dependency)."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    return [node for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))]


def test_every_package_has_a_layer():
    unknown = sorted({_top(path) for path in SOURCES} - set(LAYER_OF))
    assert not unknown, f"give these a layer in tests/test_layering.py: {unknown}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_imports_go_downwards(path):
    here = _top(path)
    upward = [
        f"line {node.lineno}: {here} (layer {LAYER_OF[here] + 1}) imports {name} (layer {LAYER_OF[name] + 1})"
        for node in _statements(path)
        for name in _imported(path, node)
        if name in LAYER_OF and LAYER_OF[name] > LAYER_OF[here]
    ]
    assert not upward, "\n".join(upward)


def _breaks_saved_code(node: ast.Import | ast.ImportFrom) -> bool:
    if isinstance(node, ast.Import):
        return any(alias.name.split(".")[0] == "hfzoo" for alias in node.names)
    if node.level == 0:
        return (node.module or "").split(".")[0] == "hfzoo"
    return node.level > 1 or not node.module or "." in node.module


@pytest.mark.parametrize("path", sorted((PACKAGE / "models").glob("*.py")), ids=lambda path: path.name)
def test_model_code_imports_only_flat_siblings(path):
    """save_pretrained copies `from .x import y` siblings next to the weights; any other hfzoo import breaks the
    checkpoint where hfzoo is not installed."""
    bad = [f"line {node.lineno}: {ast.unparse(node)}" for node in _statements(path) if _breaks_saved_code(node)]
    assert not bad, "\n".join(bad)
