"""All adapters on one module, stacked: per adapter method (`stacking/`) and saved heads, behind one interface.

For every adapted module of the base model the M adapters that touch it are stacked per method (`MethodStack`);
an adapter's own copy of a head (`modules_to_save`, an `nn.Linear`, e.g. a classifier) is stacked as weight
`[M+1, out, in]` + bias, with slot M holding the base module's own weights. Every composition strategy is built
from three batched operations and nothing else (no Python loop over adapters on the forward path):

- `hidden`: all M adapters at once (one matmul of width M*R for LoRA);
- `combine`: weight that hidden state per adapter, one matmul back to the output width (`key_directions` and
  `score` give AdapterFusion the same low-rank view of every adapter's delta);
- `select`: only the chosen adapters, so the cost does not grow with M. Rows that are sequences gather their
  adapter's weights and `bmm`. Rows that are single tokens (token routing) do the same while they are few; many
  are grouped by adapter and multiplied with `grouped_mm` instead, because gathering the weights per token moves
  R*(in+out) floats per token, several times the data of the token itself (`GATHERED_VALUES_LIMIT`).

Selecting per row (`rows.py`) serves every per-example choice: `fixed` compositions' `adapter_names` and the
routers' top-k choices both end in `StackedAdapters.select`.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ...integrations.torch import register_grouped_mm_flops
from ..rows import SlotGroups
from .stacking import METHOD_STACKS, MethodStack
from .stacking.base import frozen
from .task_adapter import TaskAdapter

# Token routing gathers each row's adapter weights, rather than grouping the rows by adapter, while the gathered
# weights hold at most this many values: gathering copies the chosen weights per row, grouping pays a fixed cost
# per call (sorting, offsets, scattering back) that only many rows amortise; on one adapted module (LoRA r=8, 2 to
# 8 adapters, CPU) the two crossed at about 128 tokens x 8 slots x 1024 values.
GATHERED_VALUES_LIMIT = 1 << 20


class StackedHeads(nn.Module):
    """Adapters' own copies of an `nn.Linear` head (modules_to_save); slot M holds the base module's weights."""

    def __init__(self, heads: list[dict[str, torch.Tensor]], base: nn.Linear) -> None:
        super().__init__()
        self.size = len(heads)
        weight = torch.stack([h["weight"].to(base.weight) for h in heads] + [base.weight.detach()])
        self.weight = frozen(weight.clone())
        if base.bias is not None:
            self.bias = frozen(torch.stack([h["bias"].to(base.bias) for h in heads] + [base.bias.detach()]).clone())
        else:
            self.bias = None

    def hidden(self, x: torch.Tensor) -> torch.Tensor:
        """Every copy's output: [..., M, out]."""
        bias = None if self.bias is None else self.bias[: self.size].flatten()
        return F.linear(x, self.weight[: self.size].flatten(0, 1), bias).unflatten(-1, (self.size, -1))

    def combine(self, outputs: torch.Tensor, weights: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`y + sum_n weights_n * (output_n - y)`: the weighted mean of the outputs when the weights sum to 1."""
        return y + (weights.unsqueeze(-1) * (outputs - y.unsqueeze(-2))).sum(-2)

    def select(self, x: torch.Tensor, slots: torch.Tensor) -> torch.Tensor:
        """Row i ([n, T, in]) through copy `slots[i, 0]` (slot M: the base module)."""
        slot = slots[:, 0]
        output = torch.bmm(x, self.weight[slot].transpose(1, 2))
        return output if self.bias is None else output + self.bias[slot].unsqueeze(1)


class StackedAdapters(nn.Module):
    """All adapters on one module. Members: each method's adapters in `METHOD_STACKS` order, then head members.

    `member_of_adapter[a]` is adapter a's member index here (M when adapter a does not touch this module, and for
    the base model, index N); `slot_of_member[s, m]` maps member m to its slot in stack s (`stacks`, then the
    heads; that stack's zero slot for members of another stack or for M), so a gather by member index is correct
    for every stack at once. Member index M (no adapter) is also how the routers name the base output as a
    candidate (`base_is_candidate`).
    """

    def __init__(
        self, path: str, module: nn.Module, width: int, entries: list[tuple[int, TaskAdapter]], num_adapters: int
    ) -> None:
        super().__init__()
        like = next(module.parameters())
        by_type: dict[str, list[tuple[int, object]]] = {peft_type: [] for peft_type in METHOD_STACKS}
        heads = [(index, adapter.heads[path]) for index, adapter in entries if path in adapter.heads]
        for index, adapter in entries:
            if path in adapter.modules:
                by_type[adapter.peft_type].append((index, adapter.modules[path]))
        groups = [group for group in by_type.values() if group]
        if heads and groups:
            raise ValueError(
                f"{path} is both a saved head (modules_to_save) and adapted; compositions do not mix these"
            )
        self.stacks = nn.ModuleList(
            METHOD_STACKS[peft_type]([factors for _, factors in group], module, path)
            for peft_type, group in by_type.items() if group
        )
        self.heads = StackedHeads([h for _, h in heads], module) if heads else None
        if heads:
            groups.append(heads)
        self.members = [index for group in groups for index, _ in group]
        self.size, self.width = len(self.members), width
        # The routers and fusion also weigh the base module's own output (the identity) where an adapter is absent,
        # which computes exactly that here, and in a composition of one adapter, where a choice among one adapter
        # would learn nothing: there they learn how much of the adapter to apply.
        self.base_is_candidate = self.size < num_adapters or num_adapters == 1
        member_of_adapter = torch.full((num_adapters + 1,), self.size, dtype=torch.long)
        member_of_adapter[self.members] = torch.arange(self.size)
        self.register_buffer("member_of_adapter", member_of_adapter.to(like.device), persistent=False)
        slot_of_member = torch.empty(len(groups), self.size + 1, dtype=torch.long)
        offset = 0
        for index, group in enumerate(groups):
            slot_of_member[index] = len(group)
            slot_of_member[index, offset : offset + len(group)] = torch.arange(len(group))
            offset += len(group)
        self.register_buffer("slot_of_member", slot_of_member.to(like.device), persistent=False)
        self.split = [len(group) for group in groups]
        self.one_stack = len(groups) == 1  # then every slot is the member index
        self._folds = self.heads is None and len(self.stacks) == 1 and self.stacks[0].linear_in_input

    def _slots(self, stack: int, members: torch.Tensor) -> torch.Tensor:
        return members if self.one_stack else self.slot_of_member[stack][members]

    def hidden(self, x: torch.Tensor, y: torch.Tensor) -> list[torch.Tensor]:
        """Every member's hidden state, per stack (then the heads' outputs), from the module input x and output y."""
        hidden = [stack.hidden(x, y) for stack in self.stacks]
        return hidden + [self.heads.hidden(x)] if self.heads else hidden

    def combine(self, hidden: list[torch.Tensor], weights: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        """`y + sum_m weights_m * delta_m`, with `weights` [..., M] broadcastable against y's leading dims."""
        parts = weights.split(self.split, dim=-1)
        if self.heads:
            return self.heads.combine(hidden[0], parts[0], y)
        for stack, stack_hidden, stack_weights in zip(self.stacks, hidden, parts):
            y = y + stack.combine(stack_hidden, stack_weights)
        return y

    @property
    def foldable(self) -> MethodStack | None:
        """The one stack here when its hidden states are a linear map of the input (AdapterFusion folds it)."""
        return self.stacks[0] if self._folds else None

    def key_directions(self) -> torch.Tensor:
        """[P, width]: each stack's `key_directions` in turn (heads have none)."""
        return torch.cat([stack.key_directions() for stack in self.stacks])

    def score(self, hidden: list[torch.Tensor], projected: torch.Tensor) -> torch.Tensor:
        """`query . delta_m` per member, [..., M], from `projected = query @ key_directions().T` [..., P]."""
        parts = projected.split([stack.num_directions for stack in self.stacks], dim=-1)
        return torch.cat([stack.score(h, part) for stack, h, part in zip(self.stacks, hidden, parts)], dim=-1)

    def select(
        self, x: torch.Tensor, y: torch.Tensor, members: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        """Adapt y with the members chosen per row: `members` [n, k] (M = none) with `weights` [n, k] (None: k = 1,
        weight 1). x and y are [n, ...] or flatten to n rows; the result has y's shape."""
        rows = members.shape[0]
        xs, ys = x.reshape(rows, -1, x.shape[-1]), y.reshape(rows, -1, y.shape[-1])
        if self.heads:
            return self.heads.select(xs, self._slots(0, members)).reshape(y.shape)
        # grouped_mm has no CPU backward (torch 2.13): rows that need a gradient take the bmm path
        needs_grad = torch.is_grad_enabled() and (
            x.requires_grad or y.requires_grad or (weights is not None and weights.requires_grad)
        )
        if ys.shape[1] == 1 and not needs_grad and self._grouping_pays(members.numel()):
            return self._select_tokens(xs[:, 0], ys[:, 0], members, weights).reshape(y.shape)
        out = ys
        for index, stack in enumerate(self.stacks):
            out = out + stack.select(xs, ys, self._slots(index, members), weights)
        return out.reshape(y.shape)

    def _grouping_pays(self, assignments: int) -> bool:
        """Whether token rows are cheaper grouped by slot than gathered. Both compute only the chosen adapters:
        gathering copies every chosen adapter's weights per row; grouping runs one small matmul per slot, with
        more fixed work per call (sorting, offsets, scattering back) that only many rows amortise."""
        per_row = sum(stack.gathered_per_row for stack in self.stacks)
        return assignments * per_row > GATHERED_VALUES_LIMIT

    def _select_tokens(
        self, x: torch.Tensor, y: torch.Tensor, members: torch.Tensor, weights: torch.Tensor | None
    ) -> torch.Tensor:
        """`select` for rows of one token each (x [n, in], y [n, out]): rows grouped by adapter, `grouped_mm`."""
        out = y
        for index, stack in enumerate(self.stacks):
            groups = SlotGroups.of(self._slots(index, members), weights, stack.size + 1)
            out = out.index_add(0, groups.rows, stack.select_grouped(x, y, groups))
        return out


# FlopCounterMode would count no FLOPs for the grouped matmuls of token routing (MFU figures, the tests of what
# hard routing costs).
register_grouped_mm_flops()
