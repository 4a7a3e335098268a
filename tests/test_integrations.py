"""The seam to third-party internals (hfzoo/integrations/): its version guards and pyproject.toml's bounds."""

import tomllib
import warnings
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hfzoo.integrations import versions
from hfzoo.integrations.peft import add_default_targets
from hfzoo.integrations.versions import SUPPORTED, UnsupportedVersionError, version_problem, written_for

PYPROJECT = Path(__file__).resolve().parents[1] / "pyproject.toml"


def _requirements() -> dict[str, Requirement]:
    project = tomllib.loads(PYPROJECT.read_text(encoding="utf-8"))["project"]
    listed = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    return {requirement.name: requirement for requirement in map(Requirement, listed)}


def test_pyproject_bounds_are_the_guarded_ranges():
    """A user's pip resolves to exactly the versions the guards accept, no wider, no narrower."""
    requirements = _requirements()
    for library, (oldest, first_unsupported) in SUPPORTED.items():
        assert set(requirements[library].specifier) == set(Requirement(f"x>={oldest},<{first_unsupported}").specifier)


def test_every_lower_bound_is_met_by_the_tested_environment():
    """A lower bound above what the suite runs on would be a version nobody tested."""
    unmet = {
        name: f"{requirement.specifier} but {version(name)} installed"
        for name, requirement in _requirements().items()
        if not requirement.specifier.contains(version(name), prereleases=True)
    }
    assert not unmet


@pytest.mark.parametrize(
    ("library", "installed", "supported"),
    [("torch", "2.13.0+cpu", True), ("torch", "2.12.1", False), ("torch", "3.0.0", False), ("peft", "0.22.0", True),
     ("peft", "0.21.1", False), ("transformers", "5.23.0", False), ("accelerate", "2.0.0", False)],
)
def test_the_guard_names_the_supported_range(library: str, installed: str, supported: bool):
    problem = version_problem(library, installed)
    if supported:
        assert problem is None
    else:
        oldest, first_unsupported = SUPPORTED[library]
        assert f"installed {library} {installed}" in problem and f"{library}>={oldest},<{first_unsupported}" in problem


@pytest.fixture
def uses_tqdm_internals(monkeypatch):
    """A function guarded by tqdm's installed metadata, with a supported range the installed tqdm is outside of."""
    monkeypatch.setitem(SUPPORTED, "tqdm", ("999", "1000"))
    versions._installed_problem.cache_clear()

    @written_for("tqdm")
    def uses_tqdm_internals() -> str:
        return "ran"

    yield uses_tqdm_internals
    versions._installed_problem.cache_clear()


def test_a_guarded_function_refuses_an_installed_version_outside_its_range(uses_tqdm_internals):
    refusal = r"uses_tqdm_internals: installed tqdm .* tqdm>=999,<1000.* set HFZOO_ALLOW_UNSUPPORTED_VERSIONS=1"
    with pytest.raises(UnsupportedVersionError, match=refusal):
        uses_tqdm_internals()


def test_the_override_runs_an_unsupported_version_with_one_warning(uses_tqdm_internals, monkeypatch):
    """A GPU image's torch cannot be swapped for the tested one: HFZOO_ALLOW_UNSUPPORTED_VERSIONS=1 runs anyway."""
    monkeypatch.setenv(versions.ALLOW_UNSUPPORTED, "1")
    monkeypatch.setattr(versions, "_warned", set())
    with pytest.warns(UserWarning, match=r"installed tqdm .*running anyway because HFZOO_ALLOW_UNSUPPORTED"):
        assert uses_tqdm_internals() == "ran"
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert uses_tqdm_internals() == "ran"  # warned once per library, not per call


def test_default_targets_name_an_unknown_peft_mapping():
    with pytest.raises(ValueError, match="no target-module mapping 'TRANSFORMERS_MODELS_TO_NOPE_TARGET_MODULES'"):
        add_default_targets("zoo-decoder", {"TRANSFORMERS_MODELS_TO_NOPE_TARGET_MODULES": ["qkv_proj"]})
