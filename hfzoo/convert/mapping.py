"""What every family's conversion shares: rules pairing hfzoo weights with native ones, and how a rule set runs.

A rule is one correspondence (one hfzoo tensor <-> one or more native tensors, or the reverse) with its conversion
each way, so a family is described once and both directions come from the same description: import and export
cannot drift apart. Conversions are exact re-arrangements (renames, transposes, row concatenation and splits,
row rolls, scaling by a power of two where a family needs a factor), which is what makes the round trip
native -> hfzoo -> native bit-identical.
"""

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

import torch
from torch import nn

Tensor = torch.Tensor


@dataclass(frozen=True)
class Rule:
    """The hfzoo tensors `zoo` <-> the native tensors `native`.

    `to_zoo` maps the native tensors (in `native` order) to the hfzoo ones (in `zoo` order); `to_native` the
    reverse. An `optional` rule is skipped when none of its source tensors exist (BERT's pooler is in some heads
    only); a rule whose sources exist only in part is an error. `layout` names the re-arrangement ("same",
    "transposed", "rows": row blocks, "scaled", "rolled", "zeros"), which decides how what acts on a weight (an
    adapter's factors, `hfzoo.convert.adapters`) follows it.
    """

    zoo: tuple[str, ...]
    native: tuple[str, ...]
    to_zoo: Callable[[Sequence[Tensor]], Sequence[Tensor]]
    to_native: Callable[[Sequence[Tensor]], Sequence[Tensor]]
    optional: bool = False
    layout: str = "same"

    def prefixed(self, zoo_prefix: str, native_prefix: str) -> "Rule":
        return Rule(
            tuple(zoo_prefix + key for key in self.zoo),
            tuple(native_prefix + key for key in self.native),
            self.to_zoo,
            self.to_native,
            self.optional,
            self.layout,
        )


def _identity(tensors: Sequence[Tensor]) -> Sequence[Tensor]:
    return tensors


def same(zoo: str, native: str, params: Iterable[str] = ("weight",), optional: bool = False) -> list[Rule]:
    """The parameters `params` of module `zoo` are those of module `native`, unchanged."""
    return [Rule((f"{zoo}.{p}",), (f"{native}.{p}",), _identity, _identity, optional) for p in params]


def linear(zoo: str, native: str, bias: bool, optional: bool = False) -> list[Rule]:
    """An `nn.Linear` (or a norm) kept as is: its weight, and its bias where it has one."""
    return same(zoo, native, ("weight", "bias") if bias else ("weight",), optional)


def _transpose(tensors: Sequence[Tensor]) -> Sequence[Tensor]:
    return [tensors[0].t().contiguous()]


def conv1d(zoo: str, native: str) -> list[Rule]:
    """GPT-2's `Conv1D` stores its weight `[in, out]`, `nn.Linear` `[out, in]`: transposed; the bias is unchanged."""
    weight = Rule((f"{zoo}.weight",), (f"{native}.weight",), _transpose, _transpose, layout="transposed")
    return [weight, *same(zoo, native, ("bias",))]


def joined(zoo: str, natives: Sequence[str], sizes: Sequence[int], bias: bool, factors: Sequence[float] | None = None):
    """One fused hfzoo projection = the native projections' rows stacked in order (q|k|v, gate|up, k|v).

    `sizes` are the output rows of each native projection (to split the fused one on export). `factors` scale
    each part on the way in (divide on the way out); only powers of two keep the round trip bit-identical.
    """
    factors = tuple(factors or [1.0] * len(natives))

    def to_zoo(tensors: Sequence[Tensor]) -> Sequence[Tensor]:
        return [torch.cat([t * f if f != 1.0 else t for t, f in zip(tensors, factors)], dim=0)]

    def to_native(tensors: Sequence[Tensor]) -> Sequence[Tensor]:
        parts = tensors[0].split(list(sizes), dim=0)
        return [(p / f if f != 1.0 else p).contiguous() for p, f in zip(parts, factors)]

    return [
        Rule((f"{zoo}.{p}",), tuple(f"{n}.{p}" for n in natives), to_zoo, to_native, layout="rows")
        for p in (("weight", "bias") if bias else ("weight",))
    ]


def scaled(zoo: str, native: str, factor: float) -> Rule:
    """hfzoo's tensor is the native one times `factor` (a constant a native model applies and hfzoo does not)."""
    return Rule(
        (zoo,),
        (native,),
        lambda tensors: [tensors[0] * factor],
        lambda tensors: [tensors[0] / factor],
        layout="scaled",
    )


def rolled_rows(zoo: str, native: str, offset: int) -> Rule:
    """A position table read at row `position + offset` natively and at row `position` in hfzoo (BART, RoBERTa).

    Rolled rather than sliced: the `offset` rows the native model never reads move to the end of hfzoo's table,
    so nothing is lost and the round trip is exact.
    """
    return Rule(
        (zoo,),
        (native,),
        lambda tensors: [torch.roll(tensors[0], -offset, dims=0)],
        lambda tensors: [torch.roll(tensors[0], offset, dims=0)],
        layout="rolled",
    )


def native_zeros(native: str, shape: Sequence[int], why: str) -> Rule:
    """A native tensor hfzoo has no counterpart for, exported as zeros; imported only when it is all zeros.

    `why` says what the tensor is, for the error when a native model has non-zero values there.
    """

    def to_zoo(tensors: Sequence[Tensor]) -> Sequence[Tensor]:
        if tensors[0].any():
            raise ValueError(f"{native} is not all zeros, and hfzoo has nothing to hold it: {why}.")
        return []

    return Rule((), (native,), to_zoo, lambda tensors: [torch.zeros(shape)], layout="zeros")


def _storage_key(tensor: Tensor) -> tuple:
    """Identifies a tensor's memory: tied weights (one parameter under two names) share it."""
    return tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape)


def convert_state(source: dict[str, Tensor], rules: Sequence[Rule], to_zoo: bool, source_name: str) -> dict[str, Tensor]:
    """Run `rules` over a state dict, in the direction `to_zoo` says; every source tensor must be used.

    A source tensor no rule reads is an error unless it is tied to one a rule reads (the same parameter under
    another name, such as T5's `shared` and `encoder.embed_tokens`): a weight left behind would be a silent loss.
    """
    result: dict[str, Tensor] = {}
    used: set[str] = set()
    for rule in rules:
        inputs, outputs = (rule.native, rule.zoo) if to_zoo else (rule.zoo, rule.native)
        present = [key in source for key in inputs]
        if not all(present):
            if rule.optional and not any(present):
                continue
            missing = [key for key, here in zip(inputs, present) if not here]
            raise ValueError(f"{source_name} has no weight {', '.join(missing)}, which the conversion needs.")
        values = (rule.to_zoo if to_zoo else rule.to_native)([source[key].detach() for key in inputs])
        result.update(zip(outputs, values))
        used.update(inputs)
    used_storage = {_storage_key(source[key]) for key in used}
    unused = [key for key in source if key not in used and _storage_key(source[key]) not in used_storage]
    if unused:
        raise ValueError(
            f"{source_name} has weights the conversion does not map: {', '.join(unused[:8])}"
            f"{' ...' if len(unused) > 8 else ''}; converting would drop them."
        )
    return result


def load_converted(model: nn.Module, tensors: dict[str, Tensor], target_name: str) -> None:
    """Copy converted tensors into `model`: every entry of its state dict must receive a value, directly or
    through a weight tied to it, and the values given for one tied weight must agree."""
    expected = model.state_dict()
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise ValueError(f"{target_name} has no weight {', '.join(unexpected[:8])} (converted from the source).")
    filled: dict[tuple, str] = {}
    for key, value in tensors.items():
        target = expected[key]
        if tuple(value.shape) != tuple(target.shape):
            raise ValueError(
                f"{target_name}.{key}: the converted tensor has shape {list(value.shape)}, the model expects "
                f"{list(target.shape)}."
            )
        storage = _storage_key(target)
        if storage in filled and not torch.equal(tensors[filled[storage]], value):
            raise ValueError(
                f"{target_name} ties {filled[storage]} and {key} (one weight), but the source holds different "
                "values for them; untie them in the target's config."
            )
        filled[storage] = key
    empty = [key for key in expected if key not in tensors and _storage_key(expected[key]) not in filled]
    if empty:
        raise ValueError(f"{target_name}: the conversion gives no value for {', '.join(empty[:8])}.")
    with torch.no_grad():
        for key, value in tensors.items():
            expected[key].copy_(value)


def shares_weight(first: Tensor, second: Tensor) -> bool:
    """Whether two weights are one (tied) or hold equal values: a head that repeats the embedding is tied."""
    return _storage_key(first) == _storage_key(second) or (
        first.shape == second.shape and torch.equal(first, second)
    )
