"""A refused run ends with one line saying what is wrong and exit status 2; a bug keeps its traceback.

A refusal is an error hfzoo raises about the user's input: a config key, a file, a row, a checkpoint it cannot use.
The command-line entry points (`hfzoo <command>`, `python recipes/<command>.py`) run through `run_command`, which
prints such an error as "<command>: <message>" on stderr and exits with status 2 (what argparse exits with for a bad
command line: the input is wrong, not the program). `--debug` anywhere on the command line, or HFZOO_DEBUG=1, lets
the error through with its traceback instead.

Called as Python functions, hfzoo's recipes raise the error itself (a `ValueError`, a `DataError`...), except that a
bad config and a checkpoint that cannot resume the run are refused at once (`refusing`), as the command line would.
"""

from __future__ import annotations

import difflib
import dis
import os
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

from ..models.checkpoint_files import CheckpointFileError

DEBUG_SWITCH = "--debug"
DEBUG_VARIABLE = "HFZOO_DEBUG"
REFUSAL_STATUS = 2
PACKAGE = Path(__file__).resolve().parents[1]
# A path the user named that is missing, in the way or not theirs to read: the message names it, wherever it was
# raised (often in pathlib or `open`, on hfzoo's behalf).
PATH_ERRORS = (FileNotFoundError, FileExistsError, IsADirectoryError, NotADirectoryError, PermissionError)
# What hfzoo raises to refuse input: ValueError (and its CorpusError, DataError, CheckpointError), TypeError and
# KeyError naming a key, OSError (its CheckpointFileError names a file), ImportError (a package a feature needs).
# RuntimeError and NotImplementedError say that hfzoo itself went wrong: they keep their traceback.
REFUSAL_TYPES = (ValueError, TypeError, KeyError, OSError, ImportError)
Result = TypeVar("Result")


def did_you_mean(name: str, choices: Iterable[str]) -> str:
    """" Did you mean 'x'?" with the choice closest to `name`, or "" when none is close: the end of a refusal that
    names a misspelt key, title or option."""
    close = difflib.get_close_matches(name, list(choices), n=1)
    return f" Did you mean {close[0]!r}?" if close else ""


class Refusal(SystemExit):
    """A refused run: exit status 2, its one-line message already on stderr. `str()` gives the message, so a caller
    (a test, the quickstart) can still read what was refused."""

    def __init__(self, message: str):
        super().__init__(REFUSAL_STATUS)
        self.message = message

    def __str__(self) -> str:
        return self.message


def is_refusal(error: BaseException) -> bool:
    """Whether `error` refuses the user's input rather than showing a bug: a path error, hfzoo's CheckpointFileError,
    or an error of `REFUSAL_TYPES` raised by a `raise` statement in hfzoo's own code, i.e. a message hfzoo composed to
    say what is wrong. The same types raised anywhere else (a ValueError inside torch, a KeyError of a dict lookup in
    hfzoo) keep their traceback: hfzoo did not foresee them."""
    if isinstance(error, (*PATH_ERRORS, CheckpointFileError)):
        return True
    if not isinstance(error, REFUSAL_TYPES) or error.__traceback__ is None:
        return False
    innermost = error.__traceback__
    while innermost.tb_next is not None:
        innermost = innermost.tb_next
    code = innermost.tb_frame.f_code
    raised_by_statement = dis.opname[code.co_code[innermost.tb_lasti]] == "RAISE_VARARGS"
    return raised_by_statement and Path(code.co_filename).resolve().is_relative_to(PACKAGE)


def debug_requested() -> bool:
    return os.environ.get(DEBUG_VARIABLE, "") not in ("", "0")


def _one_line(error: BaseException) -> str:
    """The error's message on one line (a KeyError's `str()` would quote it)."""
    text = error.args[0] if isinstance(error, KeyError) and len(error.args) == 1 else error
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


@contextmanager
def refusing(command: str, kinds: type[Exception] | tuple[type[Exception], ...] = Exception) -> Iterator[None]:
    """A refusal among `kinds` raised inside becomes one line on stderr, "<command>: <message>", and `Refusal`
    (exit status 2), unless HFZOO_DEBUG is set; anything else passes unchanged."""
    try:
        yield
    except kinds as error:
        if debug_requested() or not is_refusal(error):
            raise
        message = f"{command}: {_one_line(error)}"
        print(message, file=sys.stderr, flush=True)
        raise Refusal(message) from None


def take_debug_switch(argv: Sequence[str] | None) -> list[str]:
    """`argv` (default: `sys.argv[1:]`) without `--debug`, which sets HFZOO_DEBUG=1: every `refusing` of the run
    then lets errors through with their traceback."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if DEBUG_SWITCH in argv:
        os.environ[DEBUG_VARIABLE] = "1"
    return [token for token in argv if token != DEBUG_SWITCH]


def run_command(command: str, argv: Sequence[str] | None, run: Callable[[list[str]], Result]) -> Result:
    """`run(argv)` as a command-line entry point runs it (`take_debug_switch`): a refusal exits with one line."""
    argv = take_debug_switch(argv)
    with refusing(command):
        return run(argv)
