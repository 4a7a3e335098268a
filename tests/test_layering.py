"""hfzoo's packages import downwards only, so a change low in the stack never has to climb back up.

The layers are the folders, as the README's map "How the code is laid out" lists them (one row per folder, lowest
layer first; the row of `hfzoo/` itself names the modules at the top of the package): a module may import from its
own layer or a lower one. Two layers have rules of their own, checked here too:
- `hfzoo/models/` is saved next to every checkpoint, so it imports only its flat siblings (`from .x import y`);
- `hfzoo/integrations/` holds every use of a third-party library's internals (private attributes, private names
  reached through `getattr`/`hasattr`/`setattr`/`vars`, overridden private hooks, global mutations), each behind a
  version guard (`written_for`). Nothing else in hfzoo, the recipes, benchmarks or card generators touches them,
  except a method that overrides a library's private hook, which carries the guard itself.
"""

import ast
import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "hfzoo"
MAP_TITLE = "## How the code is laid out"
# A row of the map: | layer | `folder/` | what it holds |
MAP_ROW = re.compile(r"^\| *(\d+) *\| *`([^`]+)` *\|(.*)\|$", re.M)


def _readme_map() -> list[tuple[int, str, str]]:
    """(layer, folder, what it holds) for each row of the README's map, in its order."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    assert MAP_TITLE in readme, f"README.md lost its map ({MAP_TITLE!r}), which gives hfzoo's layers"
    section = readme.split(MAP_TITLE, 1)[1].split("\n## ", 1)[0]
    return [(int(layer), folder, what) for layer, folder, what in MAP_ROW.findall(section)]


def _layers() -> dict[str, int]:
    """Layer (0 = lowest) of each top-level name of hfzoo: a package by its folder's row, a module at the top of the
    package by the `hfzoo/` row naming it (`cli.py`)."""
    layer_of = {}
    for layer, folder, what in _readme_map():
        if folder == "hfzoo/":
            layer_of.update({Path(name).stem: layer - 1 for name in re.findall(r"`(\w+\.py)`", what)})
        elif folder.startswith("hfzoo/"):
            layer_of[folder.removeprefix("hfzoo/").rstrip("/")] = layer - 1
    return layer_of


LAYER_OF = _layers()
SOURCES = sorted(PACKAGE.rglob("*.py"))


def test_the_map_goes_from_the_lowest_layer_up_and_names_what_exists():
    rows = _readme_map()
    layers = [layer for layer, _, _ in rows]
    assert layers == sorted(layers), f"the README's map must go from the lowest layer up, got layers {layers}"
    missing = [folder for _, folder, _ in rows if not (ROOT / folder).is_dir()]
    missing += [f"hfzoo/{name}.py" for name in LAYER_OF if not (PACKAGE / name).is_dir()
                and not (PACKAGE / f"{name}.py").is_file()]  # fmt: skip
    assert not missing, f"the README's map names what is not there: {missing}"


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
    assert not unknown, f"give these a row (a module: a mention in the `hfzoo/` row) in the README's map: {unknown}"


@pytest.mark.parametrize("path", SOURCES, ids=lambda path: str(path.relative_to(PACKAGE)))
def test_imports_go_downwards(path):
    here = _top(path)
    assert here in LAYER_OF, f"{here} has no layer: give it a row in the README's map"
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


# Third-party internals: what a private name of these libraries means can change in any release, so every use
# sits in hfzoo/integrations/, behind a guard naming the versions it was written for.
THIRD_PARTY = {"torch", "transformers", "peft", "accelerate", "datasets"}
CHECKED = sorted(
    path
    for folder in ("hfzoo", "recipes", "benchmarks", "model_cards")
    for path in (ROOT / folder).rglob("*.py")
    if (PACKAGE / "integrations") not in path.parents
)
# The shipped model code cannot import hfzoo.integrations (it must load where hfzoo is not installed), so it keeps
# the few internals that any transformers model of its own needs; each listed with its reason.
MODEL_CODE_INTERNALS = {
    ("layers.py", "_attn_implementation"): "the attention backend every transformers model dispatches on; no "
    "public name exists (transformers' own modeling files read `config._attn_implementation`)",
    ("modeling_common.py", "_loss_function"): "where PreTrainedModel's `loss_function` setter stores a user's "
    "loss; the overridden getter must honour it as transformers' own getter does",
    ("modeling_common.py", "_auto_class"): "set by the public `register_for_auto_class`; save_pretrained reads it to "
    "write auto_map, and hfzoo's save names every head of the family there only when it is set",
    ("transformer_stack.py", "_init_weights"): "transformers' hook for initialising a model's own modules, which "
    "post_init calls and every transformers modeling file overrides",
    ("modeling_encoder_decoder.py", "_get_resized_embeddings"): "PreTrainedModel's own resizing (mean-resizing "
    "included) applied to the unshared source embedding that the public resize_token_embeddings does not reach",
}


# Methods that change a dict or list in place: called on a third-party module's global they mutate that library.
MUTATORS = {"setdefault", "update", "append", "extend", "insert", "pop", "clear", "remove", "__setitem__"}


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


def _own_private_names() -> set[str]:
    """Private names that hfzoo's own code defines (functions, classes, `self._x = ...`, module globals): an access
    to any other private attribute reaches into a third-party object (an accelerator, a tensor, a config)."""
    own = set()
    for path in [*CHECKED, *(PACKAGE / "integrations").rglob("*.py")]:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                own.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Store):
                if isinstance(node.value, ast.Name) and node.value.id in ("self", "cls"):
                    own.add(node.attr)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                own.add(node.id)
            elif isinstance(node, ast.arg):
                own.add(node.arg)
    return {name for name in own if _private(name)}


OWN_PRIVATE = _own_private_names()


def _third_party_internals(path: Path) -> list[str]:
    """Imports of private third-party modules or names, private attributes of names imported from a third-party
    library, private attributes hfzoo does not define, and assignments into a third-party module's globals."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    imported, found = set(), []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in THIRD_PARTY:
                    imported.add(alias.asname or alias.name.split(".")[0])
                    if any(map(_private, alias.name.split("."))):
                        found.append((node.lineno, f"import {alias.name}"))
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in THIRD_PARTY:
            if any(map(_private, node.module.split("."))):
                found.append((node.lineno, f"from {node.module} import ..."))
            for alias in node.names:
                imported.add(alias.asname or alias.name)
                if _private(alias.name):
                    found.append((node.lineno, f"from {node.module} import {alias.name}"))
    def root_of(node: ast.AST) -> ast.AST:
        while isinstance(node, (ast.Attribute, ast.Subscript, ast.Call)):
            is_getattr = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "getattr"
            node = node.args[0] if is_getattr else node.func if isinstance(node, ast.Call) else node.value
        return node

    for node in ast.walk(tree):
        root = root_of(node)
        from_library = isinstance(root, ast.Name) and root.id in imported
        if isinstance(node, ast.Attribute) and _private(node.attr) and (from_library or node.attr not in OWN_PRIVATE):
            found.append((node.lineno, ast.unparse(node)))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in MUTATORS:
            receiver = root_of(node.func.value)
            if isinstance(receiver, ast.Name) and receiver.id in imported and node.func.value is not receiver:
                found.append((node.lineno, f"mutates {ast.unparse(node.func.value)}"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                base = target
                while isinstance(base, (ast.Attribute, ast.Subscript)):
                    base = base.value
                if target is not base and isinstance(base, ast.Name) and base.id in imported:
                    found.append((node.lineno, f"assigns {ast.unparse(target)}"))
    found = [(line, use, use.rsplit(".", 1)[-1]) for line, use in found] + _private_seams(tree)
    if path.parent == PACKAGE / "models":
        found = [(line, use, name) for line, use, name in found if (path.name, name) not in MODEL_CODE_INTERNALS]
    return [f"line {line}: {use}" for line, use, _ in sorted(set(found))]


# Reaching a name by its string: `getattr(x, "_name")`, `hasattr`, `setattr`, `delattr`; `vars(x)["_name"]`,
# `"_name" in vars(x)`, `vars(x).get("_name")`, and the same on `x.__dict__`.
REFLECTION = {"getattr", "hasattr", "setattr", "delattr"}
NAMESPACE_READS = {"get", "pop", "setdefault"}


def _private_string(node: ast.AST) -> str | None:
    is_name = isinstance(node, ast.Constant) and isinstance(node.value, str) and _private(node.value)
    return node.value if is_name else None


def _is_namespace(node: ast.AST) -> bool:
    """`vars(x)` or `x.__dict__`: an object's attributes as a dict."""
    called = isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "vars"
    return called or (isinstance(node, ast.Attribute) and node.attr == "__dict__")


def _guarded(function: ast.FunctionDef | ast.AsyncFunctionDef) -> bool:
    """Whether a function carries `@written_for(library)`."""
    return any(
        isinstance(d, ast.Call) and ast.unparse(d.func).split(".")[-1] == "written_for" for d in function.decorator_list
    )


def _library_object(tree: ast.Module, local_name: str) -> object | None:
    """What a module-level import binds `local_name` to, when it imports it from a third-party library."""
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").split(".")[0] in THIRD_PARTY:
            for alias in node.names:
                if (alias.asname or alias.name) == local_name:
                    return getattr(importlib.import_module(node.module), alias.name, None)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                top = alias.name.split(".")[0]
                if top in THIRD_PARTY and (alias.asname or top) == local_name:
                    return importlib.import_module(alias.name if alias.asname else top)
    return None


def _third_party_class(tree: ast.Module, expression: ast.expr) -> type | None:
    """The third-party class a base-class expression names (`BaseTuner`, `nn.Module`), through the module's imports."""
    chain = []
    while isinstance(expression, ast.Attribute):
        chain.insert(0, expression.attr)
        expression = expression.value
    value = _library_object(tree, expression.id) if isinstance(expression, ast.Name) else None
    for name in chain:
        value = getattr(value, name, None)
    return value if isinstance(value, type) else None


def _hfzoo_reads() -> set[str]:
    """Every attribute name hfzoo's own code reads (`x.name`): a private method of hfzoo's that nothing here reads
    is called by the library it subclasses, a hook of that library."""
    return {
        node.attr
        for path in [*CHECKED, *(PACKAGE / "integrations").rglob("*.py")]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8")))
        if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load)
    }


HFZOO_READS = _hfzoo_reads()


def _private_seams(tree: ast.Module) -> list[tuple[int, str, str]]:
    """Private names reached by their string, and, in a class deriving from a third-party class, private hooks of
    that library it overrides or private attributes of the base class it writes without `@written_for`."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in REFLECTION:
            name = _private_string(node.args[1]) if len(node.args) > 1 else None
            if name:
                found.append((node.lineno, f"{node.func.id}(..., {name!r})", name))
        elif isinstance(node, ast.Subscript) and _is_namespace(node.value) and _private_string(node.slice):
            found.append((node.lineno, ast.unparse(node), node.slice.value))
        elif isinstance(node, ast.Compare) and _private_string(node.left) and any(map(_is_namespace, node.comparators)):
            found.append((node.lineno, ast.unparse(node), node.left.value))
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in NAMESPACE_READS
              and _is_namespace(node.func.value) and node.args and _private_string(node.args[0])):  # fmt: skip
            found.append((node.lineno, ast.unparse(node), node.args[0].value))
    for cls in (node for node in ast.walk(tree) if isinstance(node, ast.ClassDef)):
        bases = [base for base in (_third_party_class(tree, expression) for expression in cls.bases) if base]
        if not bases:
            continue
        for method in cls.body:
            if not isinstance(method, (ast.FunctionDef, ast.AsyncFunctionDef)) or _guarded(method):
                continue
            hook = _private(method.name) and (
                any(hasattr(base, method.name) for base in bases) or method.name not in HFZOO_READS
            )
            if hook:
                found.append((method.lineno, f"overrides {cls.name}.{method.name}", method.name))
            for node in ast.walk(method):
                is_self = isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "self"
                if is_self and isinstance(node.ctx, ast.Store) and _private(node.attr):
                    owner = next((base for base in bases if hasattr(base, node.attr)), None)
                    if owner is not None:
                        found.append((node.lineno, f"writes {ast.unparse(node)} of {owner.__name__}", node.attr))
    return found


@pytest.mark.parametrize("path", CHECKED, ids=lambda path: str(path.relative_to(ROOT)))
def test_third_party_internals_only_in_integrations(path):
    found = _third_party_internals(path)
    assert not found, (
        "third-party internals belong in hfzoo/integrations/ (behind a version guard):\n" + "\n".join(found)
    )



@pytest.mark.parametrize("file_and_attribute", MODEL_CODE_INTERNALS, ids=lambda key: f"{key[0]}:{key[1]}")
def test_each_model_code_internal_listed_is_still_used(file_and_attribute):
    """An entry whose use is gone would let the next one in unreviewed: drop it with the use."""
    name, attribute = file_and_attribute
    source = (PACKAGE / "models" / name).read_text(encoding="utf-8")
    assert f".{attribute}" in source or f'"{attribute}"' in source, f"drop {name}:{attribute}"
