"""WikiExtractor output (``<doc id=… url=… title=…>`` … ``</doc>`` blocks, one paragraph per line) read as a corpus
of whole articles.

One article is one text, its paragraphs joined by newlines, so that everything downstream that works per text works
per article: the validation split held out by a hash of each text holds out whole articles, and objectives that pair
segments of one document (next-sentence prediction) never pair two articles. The markup lines are dropped; the title
line (the first line of each block, HTML-escaped as the attribute is) is dropped unless asked for, since it repeats
the article's first words; asked for, it is given unescaped.

A file is recognised by its content (its first line opens a ``<doc``), not its name: WikiExtractor names its files
``AA/wiki_00`` without a suffix. Articles can be left out by title (``exclude_titles``, for example the articles of an
evaluation set such as SQuAD's); a title that is not in the corpus is refused by name, since a misspelt exclusion would
silently leave the overlap in.
"""

from __future__ import annotations

import difflib
import html
import re
from collections.abc import Collection, Iterable, Iterator

from .text_files import CorpusError, decoded_lines

_DOC_OPEN = re.compile(r'<doc\b[^>]*\btitle="(?P<title>[^"]*)"[^>]*>$')


def is_wikiextractor_file(path: str) -> bool:
    """Whether the file's first line opens a WikiExtractor ``<doc`` block."""
    with open(path, "rb") as f:
        return f.read(5) == b"<doc "


def read_articles(path: str, exclude_titles: Collection[str] = (), keep_titles: bool = False) -> Iterator[dict]:
    """``{"text": article}`` for each ``<doc>`` block of `path` whose title is not excluded; malformed markup (a
    block never closed, a ``</doc>`` with none open, text outside a block, a ``<doc>`` line without a title) and
    non-UTF-8 bytes are refused naming the file and line."""
    opened_at, title, paragraphs = None, "", []
    lineno = 0
    for lineno, line in decoded_lines(path):
        line = line.rstrip("\r\n")
        if line.startswith("<doc"):
            if opened_at is not None:
                raise CorpusError(f"{path}, line {lineno}: a <doc> opens before the <doc> of line {opened_at} is "
                                  "closed with </doc>")  # fmt: skip
            if (match := _DOC_OPEN.match(line)) is None:
                raise CorpusError(f'{path}, line {lineno}: malformed <doc> line (expected <doc id="…" url="…" '
                                  f'title="…">): {line[:80]!r}')  # fmt: skip
            opened_at, title, paragraphs = lineno, html.unescape(match["title"]), []
        elif line == "</doc>":
            if opened_at is None:
                raise CorpusError(f"{path}, line {lineno}: </doc> with no <doc> open")
            if paragraphs and html.unescape(paragraphs[0]).strip() == title.strip():
                paragraphs = paragraphs[1:]
            if keep_titles:
                paragraphs = [title, *paragraphs]
            text = "\n".join(p for p in paragraphs if p.strip())
            if title not in exclude_titles and text:
                yield {"text": text}
            opened_at = None
        elif opened_at is not None:
            paragraphs.append(line)
        elif line.strip():
            raise CorpusError(f"{path}, line {lineno}: text outside a <doc> … </doc> block")
    if opened_at is not None:
        raise CorpusError(f"{path}, line {opened_at}: <doc> never closed with </doc> (the file ends at line {lineno})")


def check_titles_present(paths: Iterable[str], titles: Collection[str], where: str) -> None:
    """Refuse titles to exclude that no ``<doc>`` of `paths` has, naming each with the closest title there is."""
    found: set[str] = set()
    for path in paths:
        with open(path, "rb") as f:
            for raw in f:
                if raw.startswith(b"<doc") and (match := _DOC_OPEN.match(raw.decode("utf-8", "replace").rstrip())):
                    found.add(html.unescape(match["title"]))
    if missing := [t for t in titles if t not in found]:
        hints = [f"{t!r}" + (f" (did you mean {close[0]!r}?)" if (close := difflib.get_close_matches(t, found, 1))
                             else "") for t in missing]  # fmt: skip
        raise CorpusError(f"{where}: exclude_titles names articles the corpus does not have: {', '.join(hints)}")
