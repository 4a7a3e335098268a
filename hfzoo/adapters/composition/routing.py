"""How the stacked adapters of one module are combined: fixed selection, weighted average, soft and hard routers,
AdapterFusion. Each combiner is an `nn.Module` called as `combiner(layer, x, y)` with the module input x and base
output y, and builds only on `StackedAdapters`' batched operations (see `stacked.py`), so no strategy loops over
adapters and none runs the model twice. `strategies.py` declares which strategy uses which combiner.

Routing inputs of a call (per-example adapter names, padding masks) reach the layers through the `RoutingContext`
their `ComposedModel` sets for the duration of `forward`/`generate`; no global state. The context is thread-local,
so one composition serves concurrent calls from several threads, each with its own `adapter_names` and masks.
"""

from __future__ import annotations

import threading
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn
from transformers.pytorch_utils import Conv1D

from ...integrations.torch import has_hooks, tensor_versions
from ..rows import expand_rows
from .stacked import StackedAdapters

MASK_KEYS = ("attention_mask", "decoder_attention_mask")
GRANULARITIES = ("token", "sequence")


class RoutingContext(threading.local):
    """The routing inputs of the `ComposedModel` call in progress, shared by its `ComposedLayer`s.

    Thread-local (each thread sees its own attributes, starting from `reset()`'s values), so calls of one
    composition from several threads at once do not see each other's adapter names or masks; reading an attribute
    of a `threading.local` costs about what reading a plain attribute does, so the forward path does not slow down.

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


class Wrapper(nn.Module):
    """A module standing in for the one it wraps (attribute `wrapped`): the wrapped module's attributes (`weight`,
    `in_features`, `config`, ...) stay readable through it, because models and users read them."""

    wrapped: str  # the attribute holding the wrapped module

    def __getattr__(self, name: str) -> Any:
        try:
            return super().__getattr__(name)
        except AttributeError:
            if name == self.wrapped:
                raise
            return getattr(getattr(self, self.wrapped), name)


class ComposedLayer(Wrapper):
    """A base module with every adapter that targets it stacked (`adapters`) and combined by `combiner`.

    Modules returning a tuple (a mixture-of-experts block) are adapted on their first output.
    """

    wrapped = "base_layer"

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

    def forward(self, x: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        combiner = self.combiner
        if isinstance(combiner, AdapterFusion) and not args and not kwargs:
            folded = combiner.forward_folded(self, x)
            if folded is not None:
                return folded
        output = self.base_layer(x, *args, **kwargs)
        if isinstance(output, tuple):
            return (combiner(self, x, output[0]), *output[1:])
        return combiner(self, x, output)

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
    """A linear router from the module input to one logit per candidate, per token or per sequence (mean over
    non-padded tokens). The candidates are the adapters on this module, and, `with_identity`
    (`StackedAdapters.base_is_candidate`: some composed adapter does not touch this module, or only one adapter is
    composed), the base module's output: what every absent adapter computes here, so the router still chooses among
    all the composed adapters, the absent ones counted as one candidate (the last logit).
    Zero-initialised: training starts from the uniform mixture of the candidates."""

    def __init__(self, in_features: int, num_members: int, granularity: str, with_identity: bool) -> None:
        super().__init__()
        self.granularity, self.num_members = granularity, num_members
        self.proj = nn.Linear(in_features, num_members + with_identity)
        nn.init.zeros_(self.proj.weight)
        nn.init.zeros_(self.proj.bias)

    def logits(self, layer: ComposedLayer, x: torch.Tensor) -> torch.Tensor:
        """[..., M] for token routing; [batch, 1, ..., M] (broadcasting over tokens) for sequence routing."""
        # F.linear rather than calling the module: a module call costs as much as this small product
        proj = self.proj
        if self.granularity == "token":
            return F.linear(x, proj.weight, proj.bias)
        logits = F.linear(layer.sequence_summary(x), proj.weight, proj.bias)
        return logits.view(x.shape[0], *[1] * (x.dim() - 2), logits.shape[-1])


class SoftRouter(Router):
    """Softmax mixture of all adapters: one batched low-rank product of width M*r, never M forward passes."""

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        weights = self.logits(layer, x).softmax(-1)[..., : self.num_members]  # the identity adds no delta
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
    be computed). Inference: only the chosen adapters are computed (`StackedAdapters.select`: weights gathered per
    sequence and per token while tokens are few, many tokens grouped by adapter), so the cost does not grow with the
    number of adapters. k > 1 mixes the chosen ones by their renormalised router probabilities. The identity
    candidate (`Router`) is member index M, which `select` already reads as "no adapter".
    """

    def __init__(
        self, in_features: int, num_members: int, granularity: str, with_identity: bool, top_k: int,
        temperature: float,
    ) -> None:
        super().__init__(in_features, num_members, granularity, with_identity)
        self.top_k, self.temperature = min(top_k, num_members + with_identity), temperature

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        logits = self.logits(layer, x)
        if self.training:
            weights = straight_through_top_k(logits, self.top_k, self.temperature)[..., : self.num_members]
            return layer.adapters.combine(layer.adapters.hidden(x, y), weights, y)
        if self.top_k == 1:  # rows: sequences, or tokens for token routing
            return layer.adapters.select(x, y, logits.argmax(-1).reshape(-1, 1), None)
        top = logits.topk(self.top_k, dim=-1)
        members, weights = top.indices.reshape(-1, self.top_k), top.values.softmax(-1).reshape(-1, self.top_k)
        return layer.adapters.select(x, y, members, weights)


class AdapterFusion(nn.Module):
    """AdapterFusion (Pfeiffer et al., 2021, "AdapterFusion: Non-Destructive Task Composition for Transfer Learning").

    Definition, per token: the base output y queries the adapters' outputs o_n = y + delta_n,
    `a = softmax_n((Q y) . (K o_n) / temperature)`, output `sum_n a_n V o_n`, with Q, K, V linear maps of the module's
    output width (K without bias: it would add the same score to every adapter). V starts as the identity (output =
    mean of the adapters' outputs while the scores are equal), Q and K small random.

    Adapters on disjoint modules (a LoRA on qkv_proj, a bottleneck on down_proj): each module fuses the adapters
    present there and, `with_identity` (some composed adapter does not touch it; or one adapter composed), the base
    output y itself, which is what every absent adapter outputs there (o = y, delta = 0). So a module with a single
    adapter learns, per token, how much of it to apply, as the original fuses adapters that all sit at every layer;
    fusing only the present ones would be a softmax over one output, which learns nothing.

    Computed exactly as defined, only with the products in a cheaper order (taken literally it costs 3 width^2 per
    token and module, more than a fused qkv projection itself):
    - `(Q y) . (K y)` is the same for every adapter and cancels in the softmax; what remains is `(Q y + b_Q) . K
      delta_n`, and `delta_n = hidden_n @ directions_n` (`StackedAdapters.key_directions`: LoRA's B rows, a
      bottleneck's up rows and bias). So every score comes from `y @ E.T + e` with `E = directions K^T Q`, a
      [adapter hidden units, width] matrix: (M r) x width per token instead of 2 width^2;
    - the a_n sum to 1, so the output is `V (y + sum_n a_n delta_n)`: V once per token, not once per adapter;
    - on an nn.Linear / Conv1D base whose adapters' hidden states are a linear map of x (LoRA only, e.g. on a fused
      qkv_proj: `MethodStack.input_map`), y = W x + b is linear in x as
      well, so V and E fold into the base weight (`forward_folded`): one matmul of x with `[V W; A; E W]` yields
      V y, every adapter's hidden state and the score projections, and `directions V^T` maps the weighted hidden
      state back. The module then costs its own projection plus low-rank products, like a soft router.
    The weight products are computed once and reused while no gradient is needed (inference), and recomputed when
    a weight they come from changes (in place, e.g. an optimizer step or `load_state_dict`). Training computes them
    in every forward, with gradients (2 (M r) width^2 per forward rather than 2 width^2 per token), and does not
    fold. A low-rank or per-head query/key, or one fusion per block at hidden width, would be cheaper still but
    would change what AdapterFusion computes (its capacity, or where it fuses); this keeps its function exactly.
    """

    def __init__(self, width: int, temperature: float, with_identity: bool) -> None:
        super().__init__()
        self.temperature, self.with_identity = temperature, with_identity
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width, bias=False)
        self.value = nn.Linear(width, width)
        for projection in (self.query, self.key):
            nn.init.normal_(projection.weight, std=0.02)
        nn.init.zeros_(self.query.bias)
        nn.init.eye_(self.value.weight)
        nn.init.zeros_(self.value.bias)
        self._cached: tuple[tuple, dict[str, torch.Tensor]] | None = None  # (weights' identity, products)

    def forward(self, layer: ComposedLayer, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        products = self._products(layer, folded=False)
        hidden = layer.adapters.hidden(x, y)
        projected = F.linear(y, products["query"], products["query_bias"])
        attention = self._attention(layer.adapters.score(hidden, projected))
        return self.value(layer.adapters.combine(hidden, attention, y))

    def _attention(self, scores: torch.Tensor) -> torch.Tensor:
        """Softmax of the scores [..., M]; the identity candidate's score is 0 (its delta is 0; the shared
        `(Q y) . (K y)` cancels as for every adapter) and its share is dropped after the softmax (y adds no delta)."""
        scores = scores / self.temperature
        if not self.with_identity:
            return scores.softmax(-1)
        return F.pad(scores, (0, 1)).softmax(-1)[..., :-1]

    def forward_folded(self, layer: ComposedLayer, x: torch.Tensor) -> torch.Tensor | None:
        """The module's output computed from x with V and E folded into the base weight; None where that does not
        apply (another base module, adapters whose hidden state is not a linear map of x, hooks on the base
        module, or a gradient is needed)."""
        base, stack = layer.base_layer, layer.adapters.foldable
        if type(base) not in (nn.Linear, Conv1D) or stack is None:
            return None
        if has_hooks(base) or self._needs_grad(layer, folded=True):
            return None
        products = self._products(layer, folded=True)
        width, units = products["value_directions"].shape[1], stack.num_directions
        mapped = F.linear(x, products["input_map"], products["input_bias"])
        value, hidden, projected = mapped.split([width, units, units], dim=-1)
        hidden = hidden.unflatten(-1, (stack.size, -1))
        attention = self._attention(stack.score(hidden, projected))
        return value + (hidden * attention.unsqueeze(-1)).flatten(-2) @ products["value_directions"]

    def _sources(self, layer: ComposedLayer, folded: bool) -> list[torch.Tensor]:
        base = list(layer.base_layer.parameters()) if folded else []
        return [*self.parameters(), *layer.adapters.parameters(), *base]

    def _needs_grad(self, layer: ComposedLayer, folded: bool) -> bool:
        return torch.is_grad_enabled() and any(p.requires_grad for p in self._sources(layer, folded))

    def _products(self, layer: ComposedLayer, folded: bool) -> dict[str, torch.Tensor]:
        """The weight products (see the class docstring), cached while no gradient is needed."""
        if self._needs_grad(layer, folded):
            return self._compute_products(layer, folded)
        key = (folded, *tensor_versions(self._sources(layer, folded)))
        cached = self._cached  # read once: another thread may replace it meanwhile (with equal products)
        if cached is None or cached[0] != key:
            # outside inference mode, so that the cache stays usable by a later forward that records autograd
            with torch.inference_mode(False), torch.no_grad():
                cached = self._cached = (key, self._compute_products(layer, folded))
        return cached[1]

    def _compute_products(self, layer: ComposedLayer, folded: bool) -> dict[str, torch.Tensor]:
        directions = layer.adapters.key_directions()  # [P, width]
        keyed = directions @ self.key.weight.T  # row p: K applied to direction p
        query, query_bias = keyed @ self.query.weight, keyed @ self.query.bias
        if not folded:
            return {"query": query, "query_bias": query_bias}
        base = layer.base_layer
        weight = base.weight if isinstance(base, nn.Linear) else base.weight.T  # [width, in]
        bias = base.bias if base.bias is not None else weight.new_zeros(weight.shape[0])
        value = self.value.weight
        return {
            "input_map": torch.cat([value @ weight, layer.adapters.foldable.input_map(), query @ weight]),
            "input_bias": torch.cat([value @ bias + self.value.bias, query_bias.new_zeros(len(query_bias)),
                                     query @ bias + query_bias]),
            "value_directions": directions @ value.T,
        }
