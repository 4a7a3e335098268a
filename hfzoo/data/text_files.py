"""Reading users' text files line by line, so that a malformed one is refused naming its file and line."""

from __future__ import annotations

from collections.abc import Iterator


class CorpusError(ValueError):
    """Malformed corpus input; the message names the file (and the line, where there is one)."""


def decoded_lines(path: str) -> Iterator[tuple[int, str]]:
    """(line number, line with its terminator) for a UTF-8 file, checked line by line."""
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise CorpusError(
                    f"{path}, line {lineno}: not valid UTF-8 (byte 0x{raw[e.start]:02x} at column {e.start + 1})"
                ) from None
            yield lineno, line.removeprefix("\ufeff") if lineno == 1 else line
