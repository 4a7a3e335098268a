"""The README's measured figures are the cards' own. A paragraph that links a generated card (`model_cards/results/...`,
`benchmarks/README.md`, `benchmarks/results/...`) quotes only decimal figures that one of its linked cards prints in
its README, to at least as many decimals (a gap of -0.15 is a card's -0.1465), with the same sign where the README
gives one (inline code aside). The cards are generated from run records, the README's summaries of them are written
by hand: this keeps a summary from drifting when its card is regenerated with more runs, and catches a typo. A figure
derived in the prose (a ratio of two card numbers) has no card to come from: quote the card's numbers instead.
"""

import re
from decimal import ROUND_HALF_UP, Decimal
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
CARD_LINK = re.compile(r"(model_cards/results/[\w.-]+|benchmarks/README\.md|benchmarks/results/[\w.-]+)")
# 12.34, 1,406.5, 0.845x, -0.15, +4.55; not a version (5.24.0), a name (gpt2.5b) or 1e-3.
FIGURE = re.compile(r"(?<![\w.,/])[-+]?\d[\d,]*\.\d+(?![\d.]|[A-Za-wyz])")


def figures(text: str) -> list[str]:
    return FIGURE.findall(re.sub(r"`[^`]*`", "", text))


def card_figures(link: str) -> list[str]:
    """Every decimal a card prints in its README (a card folder's README.md, or the linked Markdown file itself):
    what a reader checks the figure against. Not results.json or the run records, whose hundreds of numbers would
    let a wrong figure find a match."""
    path = ROOT / link
    card = path / "README.md" if path.is_dir() else path
    return figures(card.read_text(encoding="utf-8")) if card.suffix == ".md" else []


def found(quoted: str, printed: list[str]) -> bool:
    value = Decimal(quoted.replace(",", ""))
    decimals = -value.as_tuple().exponent
    for figure in printed:
        card = Decimal(figure.replace(",", ""))
        if -card.as_tuple().exponent < decimals:
            continue  # a card's 0.8 is not the README's 0.84
        rounded = card.quantize(Decimal(1).scaleb(-decimals), ROUND_HALF_UP)
        if rounded == value if quoted[0] in "+-" else abs(rounded) == value:
            return True
    return False


def prose_paragraphs() -> list[str]:
    """The README's paragraphs outside code blocks that link a card and quote a figure."""
    prose = re.sub(r"^```\w*\n.*?^```$", "", (ROOT / "README.md").read_text(encoding="utf-8"), flags=re.S | re.M)
    return [paragraph for paragraph in prose.split("\n\n") if CARD_LINK.search(paragraph) and figures(paragraph)]


@pytest.mark.parametrize("paragraph", prose_paragraphs(), ids=lambda paragraph: " ".join(paragraph.split()[:6]))
def test_every_figure_a_paragraph_quotes_is_in_a_card_it_links(paragraph):
    printed = [figure for link in sorted(set(CARD_LINK.findall(paragraph))) for figure in card_figures(link)]
    assert printed, f"the cards this paragraph links print no figures: {CARD_LINK.findall(paragraph)}"
    assert not (unfound := [quoted for quoted in figures(paragraph) if not found(quoted, printed)]), (
        f"figures no linked card prints: {unfound}"
    )
