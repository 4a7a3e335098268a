"""`hfzoo <command>` run in the test's process as a user runs it, and the one line a refusal prints."""

import re

import pytest
from accelerate.state import AcceleratorState, GradientState

from hfzoo.cli import main as hfzoo_main


def run(argv: list) -> None:
    """`hfzoo <argv>` in this process, with accelerate's process state reset afterwards as a new process has it."""
    try:
        hfzoo_main([str(token) for token in argv])
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)


def refusal(capsys, argv: list) -> str:
    """The one line `hfzoo <argv>` prints as it exits with status 2 (after the progress bars of what it read)."""
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        run(argv)
    err = capsys.readouterr().err.splitlines()
    lines = [line for line in err if line.strip() and not re.search(r"(it|examples)/s\]", line)]
    assert exit_info.value.code == 2 and len(lines) == 1 and lines[0].startswith(f"{argv[0]}: "), lines
    return lines[0]
