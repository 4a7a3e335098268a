"""CPU speed without changing a single value: where weights sit in memory, and how few-row products are ordered.

Nothing here changes shapes, names, files or results; it changes which BLAS kernel a product meets. It is not part
of the model code that `save_pretrained` copies next to the weights (`hfzoo/models/`): a checkpoint's code says
what the model computes, and how its weights are laid out for this CPU is decided by whoever runs it. hfzoo decides
it where it runs a model: the recipes apply `tune_for_cpu` to the model they train, `hfzoo generate` to the model it
decodes with, the benchmarks to the hfzoo side of each comparison. It only swaps the class of plain `nn.Linear`
modules for a subclass (same parameters, same state dict), so it applies to any model, native transformers
models included.
"""

import torch
from torch import nn
from transformers import PreTrainedModel

FEW_ROWS = range(2, 33)  # row counts for which `FewRowsLinear` reorders the product (see there)


class FewRowsLinear(nn.Linear):
    """`nn.Linear` that computes its product as `(W @ states.T).T` when 2-32 rows meet the weight on the CPU at
    inference; the vocabulary projection (output head) is made one by `tune_for_cpu`.

    Why: for a handful of rows this CPU's BLAS computes `states @ W.T` with a kernel that reads a row-major W at
    about half the speed of the one it picks for `W @ states.T`; at 1 row and from ~128 rows the two are equal. The
    vocabulary projection is the largest matmul of a decoding step, so batched decoding gains most here. The head
    keeps its row-major weight (tied, it is the embedding, whose row lookup needs it so), hence the reordering.
    """

    def forward(self, states: torch.Tensor) -> torch.Tensor:
        rows = states.numel() // states.shape[-1]
        # Bounds compared, not `in`: under torch.compile with dynamic shapes `rows` is symbolic, and a range cannot
        # test membership of a symbol (a graph break that fullgraph=True turns into an error).
        if (
            states.device.type != "cpu"
            or not FEW_ROWS.start <= rows < FEW_ROWS.stop
            or not self.weight.is_contiguous()
            or (torch.is_grad_enabled() and (self.weight.requires_grad or states.requires_grad))
        ):
            return super().forward(states)
        columns = states.reshape(rows, -1).t()
        weight = self.weight
        product = torch.mm(weight, columns) if self.bias is None else torch.addmm(self.bias[:, None], weight, columns)
        return product.t().contiguous().view(*states.shape[:-1], -1)


class ModeFollowingLinear(nn.Linear):
    """`nn.Linear` whose weight layout follows its mode; `tune_for_cpu` makes every projection that changes the
    width by 2x or more one.

    Its smaller dimension is outermost in RAM in eval mode and its larger dimension in training mode (`[out, in]`
    to every API either way):
    - Decoding one token per row, the CPU's matrix-vector product reads a widening weight 2-3x faster input-major
      and a narrowing one faster output-major; projections that widen less gain little, hence the 2x threshold.
    - Training, the weight gradient is a product shaped like the weight's RAM layout, and this CPU computes it
      faster with the larger dimension outermost. Optimizer state created in training mode has the training
      layout, and switching back from eval restores it. The price is a copy of the weight per mode switch, paid
      once per evaluation of a training run; `train()` calls that change no mode (Trainer's, every step) copy nothing.

    `.data` is swapped in place, so optimizers and PEFT keep their references. Only a weight that owns its whole
    storage moves: a view into a flat buffer (FSDP) or a partitioned placeholder stays where its owner put it.
    """

    def train(self, mode: bool = True) -> "ModeFollowingLinear":
        changes_mode = self.training != mode
        super().train(mode)
        if changes_mode:
            self.arrange()
        return self

    def arrange(self) -> None:
        """Lay the weight out for the current mode (nothing to do when it already is)."""
        weight = self.weight
        if not weight.is_floating_point() or not _owns_storage(weight):
            return
        widening = self.out_features > self.in_features
        # Input-major puts the input dimension outermost: wanted when it is the smaller one in eval, larger in training.
        wants_input_major = widening != self.training
        is_input_major = weight.stride() == (1, self.out_features)
        if wants_input_major and not is_input_major:
            weight.data = weight.data.t().contiguous().t()
        elif is_input_major and not wants_input_major:
            weight.data = weight.data.contiguous()


def tune_for_cpu(model: nn.Module) -> nn.Module:
    """Give `model`'s projections their CPU layouts, in place; returns `model`. Idempotent.

    - The output head of each transformers model inside (`get_output_embeddings()`, when it is a plain `nn.Linear`)
      becomes a `FewRowsLinear`.
    - Every other plain `nn.Linear` that changes the width by 2x or more becomes a `ModeFollowingLinear`, laid out
      for its current mode.
    - Every parameter starts on a 64-byte boundary. A weight read from a safetensors file starts wherever the file
      puts it, and BLAS results can differ in the last bit with alignment; aligned, a reloaded model computes
      exactly what the saved one did.

    Apply it after loading and after resizing the embeddings (a resized untied head is a new `nn.Linear`).
    """
    # The vocabulary projection of every transformers model inside (ELECTRA's pair holds two).
    heads = [module.get_output_embeddings() for module in model.modules() if isinstance(module, PreTrainedModel)]
    for module in model.modules():
        if type(module) is not nn.Linear:
            continue
        if any(module is head for head in heads):
            module.__class__ = FewRowsLinear
        elif max(module.out_features, module.in_features) >= 2 * min(module.out_features, module.in_features):
            module.__class__ = ModeFollowingLinear
            module.arrange()
    for parameter in model.parameters():
        if parameter.data_ptr() % 64 and _owns_storage(parameter):
            parameter.data = parameter.data.clone()
    return model


def _owns_storage(parameter: torch.Tensor) -> bool:
    """A plain tensor that is its storage's only content (not a view into a flat buffer, not a tensor subclass)."""
    return (
        type(parameter.data) is torch.Tensor
        and parameter.untyped_storage().nbytes() == parameter.numel() * parameter.element_size()
    )
