"""ULMFiT's fine-tuning techniques (Howard & Ruder, 2018) on any model: layer groups, discriminative learning rates
(section 3.2: each group below the top one learns `decay` times slower, 2.6 in the paper) and gradual unfreezing
(3.3: one more group from the top every epoch). The slanted triangular schedule is in `hfzoo.training.loop`.

A model's layer groups are, from the top: the head (whatever follows the last transformer block: final norm, pooler,
classifier), each block from the top, the embeddings (whatever precedes the first block). Blocks are found without
knowing the architecture, so hfzoo models, transformers' own and PEFT-wrapped ones all work: the entries of every
ModuleList whose classes the model names in `_no_split_modules`, or, where a model names none (transformers 5's
BERT), the outermost ModuleLists of one repeated module class.
"""

from __future__ import annotations

from collections.abc import Sequence

from torch import nn

from ..integrations.transformers import block_class_names


def find_blocks(model: nn.Module) -> list[nn.Module]:
    """The model's transformer blocks (LSTM layers, ...) in the order their parameters are registered: an
    encoder-decoder's encoder blocks, then its decoder blocks."""
    no_split = block_class_names(model)
    lists = [m for m in model.modules() if isinstance(m, nn.ModuleList) and len(m) > 0]
    chosen = [m for m in lists if all(type(child).__name__ in no_split for child in m)]
    if not chosen:
        repeated = [m for m in lists if len({type(c) for c in m}) == 1 and any(True for _ in m.parameters())]
        inner = {id(sub) for m in repeated for child in m for sub in child.modules()}
        chosen = [m for m in repeated if id(m) not in inner]
    return [block for blocks in chosen for block in blocks]


def layer_groups(model: nn.Module) -> list[list[nn.Parameter]]:
    """The model's parameters in ULMFiT's layer groups, top first: head, blocks from the top, embeddings. Parameters
    between two blocks (an encoder's final norm, a decoder's position bias) join the block below them."""
    blocks = find_blocks(model)
    if not blocks:
        raise ValueError(
            f"{type(model).__name__} has no repeated blocks (a ModuleList of layers) to split into layer groups for "
            "discriminative_lr_decay or gradual_unfreezing"
        )
    block_of = {id(p): i for i, block in enumerate(blocks) for p in block.parameters()}
    ordered = [(p, block_of.get(id(p))) for p in model.parameters()]
    indices = [i for i, (_, block) in enumerate(ordered) if block is not None]
    first, last = indices[0], indices[-1]
    bottom_up: list[list[nn.Parameter]] = [[] for _ in range(len(blocks) + 2)]  # embeddings, blocks, head
    below = 0
    for position, (parameter, block) in enumerate(ordered):
        if block is not None:
            below = block + 1
        group = 0 if position < first else len(blocks) + 1 if position > last else below
        bottom_up[group].append(parameter)
    return bottom_up[::-1]


def discriminative_learning_rates(
    groups: Sequence[Sequence[nn.Parameter]], learning_rate: float, decay: float
) -> list[tuple[Sequence[nn.Parameter], float]]:
    """(parameters, learning rate) per layer group (top first): the top one gets `learning_rate`, the one below
    `learning_rate / decay`, the next `learning_rate / decay**2`, ..."""
    return [(parameters, learning_rate / decay**depth) for depth, parameters in enumerate(groups)]


class GradualUnfreezing:
    """Trains only the top layer group at first and unfreezes one more group from the top every `every` optimizer
    steps. A frozen parameter gets no gradient, so AdamW leaves it (and its moments) untouched: its weights stay
    bit-identical until its group is unfrozen. The stage is a function of the step alone, so a run resumed from a
    checkpoint is back at the stage it was killed in once `apply(step)` is called with the restored step.

    Only parameters trainable when it is made take part: what the fine-tuning method froze (a LoRA base) stays frozen.
    It must be made after the optimizer, which takes only the parameters that require gradients."""

    def __init__(self, groups: Sequence[Sequence[nn.Parameter]], every: int):
        self.groups = [[p for p in parameters if p.requires_grad] for parameters in groups]
        self.every = every

    def trained_groups(self, step: int) -> int:
        """How many layer groups (from the top) train in the optimizer step after `step` completed ones."""
        return min(len(self.groups), 1 + step // self.every)

    def apply(self, step: int) -> None:
        """Freeze and unfreeze for the optimizer step after `step` completed ones."""
        trained = self.trained_groups(step)
        for depth, parameters in enumerate(self.groups):
            for parameter in parameters:
                parameter.requires_grad_(depth < trained)
