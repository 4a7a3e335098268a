"""The versions each integration was written for, and the guard that refuses any other.

pyproject.toml's bounds for these libraries are these ranges (a test keeps them equal): the lower bound is the
version the test suite passed on, the upper bound the next release line, whose internals nobody has checked.

`HFZOO_ALLOW_UNSUPPORTED_VERSIONS=1` turns the refusal into a warning, once per library: for a machine whose
library cannot be changed (a GPU image's CUDA build of torch, say), at the user's own risk.
"""

import functools
import os
import warnings
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from typing import TypeVar

from packaging.version import Version

# library -> (oldest tested version, first version not supported)
SUPPORTED: dict[str, tuple[str, str]] = {
    "torch": ("2.13.0", "3"),
    "transformers": ("5.24.0", "6"),
    "peft": ("0.21.2", "1"),
    "accelerate": ("1.15.0", "2"),
}

ALLOW_UNSUPPORTED = "HFZOO_ALLOW_UNSUPPORTED_VERSIONS"

Function = TypeVar("Function", bound=Callable)


class UnsupportedVersionError(RuntimeError):
    """The installed version of a library is outside the range an integration was written for."""


def version_problem(library: str, installed: str) -> str | None:
    """Why `installed` is not a supported version of `library` (None when it is)."""
    oldest, first_unsupported = SUPPORTED[library]
    if Version(oldest) <= Version(installed) < Version(first_unsupported):
        return None
    return (
        f"installed {library} {installed}, but hfzoo was written for {library}>={oldest},<{first_unsupported}: "
        f"pip install '{library}>={oldest},<{first_unsupported}'"
    )


@functools.cache
def _installed_problem(library: str) -> str | None:
    """Checked once per process: reading package metadata is cheap, but some guarded functions run per forward."""
    try:
        return version_problem(library, version(library))
    except PackageNotFoundError:
        return f"{library} is not installed; hfzoo needs {library}>={SUPPORTED[library][0]}"


_warned: set[str] = set()  # the libraries already warned about under ALLOW_UNSUPPORTED


def _refuse_or_warn(library: str, message: str) -> None:
    if os.environ.get(ALLOW_UNSUPPORTED) != "1":
        raise UnsupportedVersionError(f"{message} (or set {ALLOW_UNSUPPORTED}=1 to run anyway)")
    if library not in _warned:
        _warned.add(library)
        warnings.warn(f"{message}; running anyway because {ALLOW_UNSUPPORTED}=1", stacklevel=3)


def written_for(library: str) -> Callable[[Function], Function]:
    """Mark a function as using `library`'s internals: calling it with an unsupported version installed raises
    `UnsupportedVersionError` naming the function and the range (a warning instead under ALLOW_UNSUPPORTED)."""

    def decorate(function: Function) -> Function:
        @functools.wraps(function)
        def guarded(*args, **kwargs):
            problem = _installed_problem(library)
            if problem is not None:
                _refuse_or_warn(library, f"{function.__module__}.{function.__qualname__}: {problem}")
            return function(*args, **kwargs)

        return guarded  # type: ignore[return-value]

    return decorate
