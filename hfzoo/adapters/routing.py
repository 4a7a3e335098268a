"""How the stacked adapters of one module are combined: fixed selection, weighted average, soft and hard routers,
AdapterFusion. Each combiner is an `nn.Module` called as `combiner(layer, x, y)` with the module input x and base
output y, and builds only on `StackedAdapters`' batched operations (see `stacked.py`), so no method loops over
adapters and none runs the model twice.

Routing inputs of a call (per-example adapter names, padding masks) reach the layers through the `RoutingContext`
their `ComposedModel` sets for the duration of `forward`/`generate`; no global state.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from .stacked import StackedAdapters

MASK_KEYS = ("attention_mask", "decoder_attention_mask")
GRANULARITIES = ("token", "sequence")


def expand_rows(tensor: torch.Tensor, rows: int, what: str) -> torch.Tensor:
    """Repeat per-example `tensor` to `rows` rows the way beam search and `num_return_sequences` expand a batch
    (`repeat_interleave`): a batch that is a multiple of the given examples repeats each example in place."""
    given = tensor.shape[0]
    if given == rows:
        return tensor
    if given and rows % given == 0:
        return tensor.repeat_interleave(rows // given, dim=0)
    raise ValueError(f"{what} has {given} entries for a batch of {rows} rows; pass one entry per example")


class RoutingContext:
    """The routing inputs of the `ComposedModel` call in progress, shared by its `ComposedLayer`s.

    `adapter_index`: per-example adapter indices ("fixed"; index N = no adapter). `masks`: the call's padding masks,
    for sequence-level routing. `sequence_cache`: during `generate`, each layer's sequence summary from the first
    (prefill) step, reused for every generated token, so a sequence is routed by its prompt.
    """

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.adapter_index: torch.Tensor | None = None
        self.masks: dict[str, torch.Tensor] = {}
        self.sequence_cache: dict[nn.Module, torch.Tensor] | None = None


class ComposedLayer(nn.Module):
    """A base module with every adapter that targets it stacked (`adapters`) and combined by `combiner`.

    Modules returning a tuple (a mixture-of-experts block) are adapted on their first output.
    """

    def __init__(
        self,
        base_layer: nn.Module,
        adapters: StackedAdapters,
        combiner: nn.Module,
        context: RoutingContext,
        mask_key: str,
    ) -> None:
        super().__init__()
        self.base_layer, self.adapters, self.combiner = base_layer, adapters, combiner
        self.mask_key = mask_key
        object.__setattr__(self, "context", context)  # shared by all layers of a model: not a submodule

    def __getattr__(self, name: str) -> Any:
        """Attributes of the wrapped module (`weight`, `in_features`, ...) stay readable: models read them."""
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == "base_layer":
                raise
            return getattr(self.base_layer, name)

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        output = self.base_layer(x, *args, **kwargs)
        y = output[0] if isinstance(output, tuple) else output
        y = self.combiner(self, x, y)
        return (y, *output[1:]) if isinstance(output, tuple) else y

    def sequence_summary(self, x: torch.Tensor) -> torch.Tensor:
        """Mean of x over its non-padded tokens: [batch, features] (x of shape [batch, features] is returned as is).

        Decoder-side modules of an encoder-decoder use `decoder_attention_mask` (and no mask when it is absent), so a
        cross-attention key/value projection, whose input is the encoder output, averages all encoder positions.
        """
        cache = self.context.sequence_cache
        if cache is not None and self in cache:
            return cache[self]
        if x.dim() == 2:
            summary = x
        else:
            mask = self.context.masks.get(self.mask_key)
            if mask is None or mask.shape[1] != x.shape[1]:
                summary = x.mean(1)
            else:
                weights = expand_rows(mask, x.shape[0], self.mask_key).to(x.dtype).unsqueeze(-1)
                summary = (x * weights).sum(1) / weights.sum(1).clamp(min=1)
        if cache is not None:
            cache[self] = summary
        return summary


# ----------------------------------------------------------------------------------------------- combiners
class FixedSelection(nn.Module):
    """Each example names its adapter (`adapter_names`); the chosen weights are gathered per row and applied with one
    `bmm`, so a batch mixing any number of adapters costs about one adapter."""

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        index = layer.context.adapter_index
        if index is None:
            raise ValueError(
                "a 'fixed' composition needs `adapter_names=[...]` (one adapter name or '__base__' per example) in "
                "forward/generate of the ComposedModel"
            )
        if y.dim() == 2 and y.shape[0] != index.shape[0]:
            raise ValueError(
                f"a module adapted here receives {y.shape[0]} rows for {index.shape[0]} examples: its rows are not "
                "the examples (e.g. the tokens routed to one expert of a mixture of experts), so they cannot be "
                "matched to adapter_names; adapt such modules only in 'average' or token-routed compositions"
            )
        members = layer.adapters.member_of_adapter[expand_rows(index, y.shape[0], "adapter_names")]
        return layer.adapters.select(x, y, members.unsqueeze(1), None)


class WeightedAverage(nn.Module):
    """Output averaging `y + sum_n w_n delta_n`: the weighted mean of the adapters' outputs when the weights sum to 1.

    For LoRA this is one low-rank product over the concatenated factors (A_cat [N*r, in], B_cat scaled by w), exact.
    """

    def __init__(self, weights: torch.Tensor) -> None:
        super().__init__()
        self.register_buffer("weights", weights, persistent=False)

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return layer.adapters.combine(layer.adapters.hidden(x, y), self.weights, y)


class Router(nn.Module):
    """A linear router from the module input to one logit per adapter on this module, per token or per sequence
    (mean over non-padded tokens). Zero-initialised: training starts from the uniform mixture."""

    def __init__(self, in_features: int, num_members: int, granularity: str) -> None:
        super().__init__()
        self.granularity = granularity
        self.proj = nn.Linear(in_features, num_members)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def logits(self, layer: ComposedLayer, x: torch.Tensor) -> torch.Tensor:
        """[..., M] for token routing; [batch, 1, ..., M] (broadcasting over tokens) for sequence routing."""
        if self.granularity == "token":
            return self.proj(x)
        logits = self.proj(layer.sequence_summary(x))
        return logits.view(x.shape[0], *[1] * (x.dim() - 2), logits.shape[-1])


class SoftRouter(Router):
    """Softmax mixture of all adapters: one batched low-rank product of width M*r, never M forward passes."""

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        weights = self.logits(layer, x).softmax(-1)
        return layer.adapters.combine(layer.adapters.hidden(x, y), weights, y)


def straight_through_top_k(logits: torch.Tensor, k: int, temperature: float) -> torch.Tensor:
    """Gumbel-softmax with a hard forward: the top-k (renormalised; 1.0 for k = 1) forward, the soft gradient."""
    gumbels = -torch.empty_like(logits).exponential_().log()
    soft = ((logits + gumbels) / temperature).softmax(-1)
    top = soft.topk(k, dim=-1)
    hard = torch.zeros_like(soft).scatter(-1, top.indices, top.values / top.values.sum(-1, keepdim=True))
    return hard - soft.detach() + soft


class HardRouter(Router):
    """Picks the top-k adapters per token or sequence.

    Training: straight-through Gumbel-softmax over all adapters (hard forward, soft gradient, so every adapter must
    be computed). Inference: only the chosen adapters' weights are gathered (per row, or per token) and applied with
    `bmm`, so the cost does not grow with the number of adapters. k > 1 mixes the chosen ones by their renormalised
    router probabilities.
    """

    def __init__(self, in_features: int, num_members: int, granularity: str, top_k: int, temperature: float) -> None:
        super().__init__(in_features, num_members, granularity)
        self.top_k, self.temperature = min(top_k, num_members), temperature

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.logits(layer, x)
        if self.training:
            weights = straight_through_top_k(logits, self.top_k, self.temperature)
            return layer.adapters.combine(layer.adapters.hidden(x, y), weights, y)
        top = logits.topk(self.top_k, dim=-1)
        members = top.indices.reshape(-1, self.top_k)  # rows: sequences, or tokens for token routing
        weights = None if self.top_k == 1 else top.values.softmax(-1).reshape(-1, self.top_k)
        return layer.adapters.select(x, y, members, weights)


class AdapterFusion(nn.Module):
    """AdapterFusion (Pfeiffer et al., 2021, "AdapterFusion: Non-Destructive Task Composition for Transfer Learning").

    Per token, the base output y queries the adapters' outputs o_n = y + delta_n:
    `a = softmax_n((Q y) . (K o_n) / temperature)`, output `sum_n a_n V o_n`. Linearity keeps it at the cost of a soft
    mixture: `(Q y) . (K o_n) = (K^T Q y) . o_n`, whose `. y` part is the same for every adapter and cancels in the
    softmax, and `(K^T Q y) . delta_n` comes from the stacked hidden state without forming delta_n; the output is
    `V (y + sum_n a_n delta_n)` because the a_n sum to 1. So Q, K and V are applied once per token, not N times.
    K has no bias: it would add the same score to every adapter. V starts as the identity (output = mean of the
    adapters' outputs while the scores are equal), Q and K small random.
    """

    def __init__(self, width: int, temperature: float) -> None:
        super().__init__()
        self.temperature = temperature
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width)
        for projection in (self.query, self.key):
            nn.init.normal_(projection.weight, std=0.02)
        nn.init.zeros_(self.query.bias)
        nn.init.eye_(self.value.weight)
        nn.init.zeros_(self.value.bias)

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        hidden = layer.adapters.hidden(x, y)
        query = self.query(y) @ self.key.weight  # K^T Q y, as a row vector
        attention = (layer.adapters.score(hidden, query) / self.temperature).softmax(-1)
        return self.value(layer.adapters.combine(hidden, attention, y))
