"""Random spans over a batch of sequences: T5's segmentation, SpanBERT/BART span placement.

All functions work on whole batches with per-row counts (rows may differ in length), with no
Python loop over rows, spans or tokens. A span layout is described by ``starts`` and ``lengths``
(``[B, K]``, non-overlapping, in increasing order; columns past a row's spans have length 0) and
turned into a per-position span index by :func:`span_index`.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F

from .common import choose

# draw(shape, generator) -> integer span lengths of that shape
LengthSampler = Callable[[tuple[int, int], torch.Generator | None], torch.Tensor]


def random_segmentation(
    num_items: torch.Tensor, num_segments: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """Split ``num_items[b]`` items into ``num_segments[b]`` non-empty segments, uniformly at random.

    T5's ``_random_segmentation``: segment boundaries are ``num_segments - 1`` of the
    ``num_items - 1`` gaps between items, chosen uniformly. Returns lengths ``[B, max segments]``
    (0 past a row's segments). Needs ``1 <= num_segments <= num_items`` (or 1 segment of 0 items).
    """
    max_items = int(num_items.max())
    gaps = torch.arange(max(max_items - 1, 0))
    cut = choose(gaps < (num_items - 1)[:, None], (num_segments - 1).clamp(min=0), generator)
    segment = F.pad(cut.long().cumsum(1), (1, 0))[:, :max_items]
    is_item = torch.arange(max_items) < num_items[:, None]
    lengths = torch.zeros(len(num_items), int(num_segments.max()), dtype=torch.long)
    return lengths.scatter_add_(1, segment, is_item.long())


def span_index(starts: torch.Tensor, lengths: torch.Tensor, width: int) -> torch.Tensor:
    """``[B, width]``: the index of the span covering each position, -1 outside every span."""
    positions = torch.arange(width).expand(len(starts), width).contiguous()
    if starts.shape[1] == 0:
        return torch.full_like(positions, -1)
    ends = (starts + lengths).contiguous()
    candidate = torch.searchsorted(ends, positions, right=True)  # first span ending after the position
    clamped = candidate.clamp(max=starts.shape[1] - 1)
    inside = (candidate < starts.shape[1]) & (starts.gather(1, clamped) <= positions)
    return torch.where(inside, clamped, -1)


def interleave(gaps: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Starts of spans laid out as gap 0, span 0, gap 1, span 1, ... (``gaps`` has >= K columns)."""
    return gaps[:, : lengths.shape[1]].cumsum(1) + lengths.cumsum(1) - lengths


def truncated_geometric(p: float, max_length: int) -> LengthSampler:
    """Lengths ``1..max_length`` with P(l) proportional to ``p (1-p)^(l-1)``: SpanBERT's span lengths.

    SpanBERT's "clipped at 10" renormalises the geometric over 1..10 (mean 3.8 at p=0.2)
    rather than piling the tail onto 10.
    """
    probs = p * (1 - p) ** torch.arange(max_length, dtype=torch.float64)

    def draw(shape: tuple[int, int], generator: torch.Generator | None) -> torch.Tensor:
        flat = torch.multinomial(probs, shape[0] * shape[1], replacement=True, generator=generator)
        return flat.view(shape) + 1

    return draw


def poisson(rate: float) -> LengthSampler:
    """Poisson(``rate``) lengths, zeros included: BART's text-infilling spans."""

    def draw(shape: tuple[int, int], generator: torch.Generator | None) -> torch.Tensor:
        return torch.poisson(torch.full(shape, float(rate)), generator=generator).long()

    return draw


def lengths_until_budget(
    budget: torch.Tensor, draw: LengthSampler, generator: torch.Generator | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """Span lengths drawn i.i.d. until they reach ``budget[b]``, the last one cut to hit it exactly.

    As fairseq's ``add_whole_word_mask``: a span is used while the ones before it sum to less
    than the budget; zero-length spans (Poisson) count as spans. Returns ``(lengths [B, K],
    number of spans [B])``.
    """
    width = int(budget.max()) + 1 if len(budget) else 1
    lengths = draw((len(budget), width), generator)
    while (lengths.sum(1) < budget).any():  # only zero-length draws can leave a row short
        lengths = torch.cat([lengths, draw((len(budget), width), generator)], 1)
    before = lengths.cumsum(1) - lengths
    used = before < budget[:, None]
    lengths = torch.minimum(lengths, budget[:, None] - before) * used
    num_spans = used.sum(1)
    return lengths[:, : int(num_spans.max()) if len(budget) else 0], num_spans


def place_spans(
    lengths: torch.Tensor, num_spans: torch.Tensor, num_units: torch.Tensor, generator: torch.Generator | None
) -> torch.Tensor:
    """Lay spans of the given (positive) lengths over ``num_units[b]`` units at random: span index per unit.

    Every arrangement with at least one free unit between consecutive spans is equally likely
    (the free units are cut into ``K + 1`` gaps by :func:`random_segmentation`), so each span
    stays a separate run whose length is exactly its sampled length. SpanBERT and fairseq pick
    span starts independently, so spans can touch or overlap and merge into longer runs; in
    fairseq overlaps also shrink the masked fraction (a 30% budget of Poisson(3) spans covers
    about 27% of a 100-word row in a simulation of its algorithm). Rows too crowded to separate
    every span (``free < K - 1``, only in very short rows) let spans touch.
    """
    lengths = lengths[:, : int(num_spans.max())]
    free = num_units - lengths.sum(1)
    separated = free >= num_spans - 1
    # K+1 positive parts of free+2 minus 1 at both ends (inner gaps >= 1), or of free+K+1 minus 1 everywhere.
    gaps = random_segmentation(torch.where(separated, free + 2, free + num_spans + 1), num_spans + 1, generator)
    column = torch.arange(gaps.shape[1])
    is_gap = column <= num_spans[:, None]
    ends = (column == 0) | (column == num_spans[:, None])
    gaps = gaps - (is_gap & (ends | ~separated[:, None])).long() - ((column == 0) & (num_spans == 0)[:, None]).long()
    return span_index(interleave(gaps, lengths), lengths, int(num_units.max()))
