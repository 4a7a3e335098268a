"""No test module imports another test module or a conftest.py: what tests share lives in tests/helpers/ or in a
fixture, so that a test module can be read, run and changed on its own (issue 34 item 6)."""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parent


def imported_modules(path: Path, tests: Path = TESTS) -> list[tuple[int, str]]:
    """(line, dotted name) of every module `path` (a file under `tests`) imports or may import: for
    `from a.b import c`, both `a.b` and `a.b.c`; relative imports resolved against the file's package."""
    package = path.relative_to(tests.parent).with_suffix("").parts[:-1]
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else ()
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(node.lineno, module), *((node.lineno, f"{module}.{alias.name}") for alias in node.names)]
    return found


def is_test_module(module: str) -> bool:
    parts = module.split(".")
    return parts[0] == "tests" and (parts[-1].startswith("test_") or parts[-1] == "conftest")


def test_no_file_under_tests_imports_a_test_module_or_a_conftest():
    edges = [
        f"{path.relative_to(TESTS.parent)}:{line} imports {module}"
        for path in sorted(TESTS.rglob("*.py"))
        for line, module in imported_modules(path)
        if is_test_module(module)
    ]
    assert not edges, "move what they share to tests/helpers/ or a fixture:\n" + "\n".join(edges)


def test_the_check_sees_absolute_relative_and_whole_module_imports(tmp_path):
    folder = tmp_path / "tests" / "commands"
    folder.mkdir(parents=True)
    (folder / "test_sample.py").write_text(
        "from tests.training.test_fsdp import launch\n"
        "from .test_pretrain_recipe import run\n"
        "from . import test_streaming\n"
        "from tests.commands import test_compose_recipe\n"
        "import tests.conftest\n"
        "from tests.helpers.recipe_runs import run_recipe\n"
        "import pytest\n"
    )
    modules = {module for _, module in imported_modules(folder / "test_sample.py", tmp_path / "tests")}
    assert {module for module in modules if is_test_module(module)} == {
        "tests.training.test_fsdp",
        "tests.commands.test_pretrain_recipe",
        "tests.commands.test_streaming",
        "tests.commands.test_compose_recipe",
        "tests.conftest",
    }
