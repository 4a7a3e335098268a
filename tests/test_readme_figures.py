"""The README's measured figures are the cards' own. A paragraph that links a generated card (`model_cards/results/...`,
`benchmarks/README.md`, `benchmarks/results/...`) quotes only decimal figures that one of its linked cards prints,
as printed or rounded to the README's decimals (a gap of -0.15 is a card's -0.1465); signs and inline code aside.
The cards are generated from run records, the README's summaries of them are written by hand: this keeps a summary
from drifting when its card is regenerated with more runs, and catches a typo. A figure derived in the prose (a ratio
of two card numbers) has no card to come from: quote the card's numbers instead.
"""

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CARD_LINK = re.compile(r"(model_cards/results/[\w.-]+|benchmarks/README\.md|benchmarks/results/[\w.-]+)")
# 12.34, 1,406.5, 0.845x, -0.15 (the sign is not read); not a version (5.24.0), a name (gpt2.5b) or 1e-3.
FIGURE = re.compile(r"(?<![\w.,/])\d[\d,]*\.\d+(?![\d.]|[A-Za-wyz])")


def figures(text: str) -> list[str]:
    return FIGURE.findall(re.sub(r"`[^`]*`", "", text))


def card_figures(link: str) -> list[Decimal]:
    """Every decimal a card prints: its Markdown and JSON files, not the run records it keeps (their logs hold so many
    numbers that a wrong figure would find a match)."""
    path = ROOT / link
    files = [path] if path.is_file() else [
        file for file in sorted(path.rglob("*")) if file.suffix in (".md", ".json") and "run_records" not in file.parts
    ]  # fmt: skip
    return [Decimal(figure.replace(",", "")) for file in files for figure in figures(file.read_text(encoding="utf-8"))]


def prose_paragraphs() -> list[str]:
    """The README's paragraphs outside code blocks."""
    prose = re.sub(r"^```\w*\n.*?^```$", "", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S | re.M)
    return [paragraph for paragraph in prose.split("\n\n") if CARD_LINK.search(paragraph)]


@pytest.mark.parametrize("paragraph", prose_paragraphs(), ids=lambda paragraph: " ".join(paragraph.split()[:6]))
def test_every_figure_a_paragraph_quotes_is_in_a_card_it_links(paragraph):
    printed = [figure for link in sorted(set(CARD_LINK.findall(paragraph))) for figure in card_figures(link)]
    assert printed, f"the cards this paragraph links print no figures: {CARD_LINK.findall(paragraph)}"
    unfound = []
    for quoted in figures(paragraph):
        value = Decimal(quoted.replace(",", ""))
        step = Decimal(1).scaleb(value.as_tuple().exponent)  # 0.01 for 64.76
        if not any(card.quantize(step, ROUND_HALF_UP) == value for card in printed):
            unfound.append(quoted)
    assert not unfound, f"figures no linked card prints: {unfound}"
