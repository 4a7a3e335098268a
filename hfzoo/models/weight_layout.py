"""CPU speed without changing a single value: where weights sit in memory, and how few-row products are ordered.

Nothing here changes shapes, names, files or results; it changes which BLAS kernel a product meets. It lives apart
from the building blocks in `layers.py` so that those read as the model, and it is imported relatively
(`from .weight_layout import ...`), so `save_pretrained` copies it next to the weights with the rest of the code.
"""

import torch
from torch import nn
from transformers.modeling_utils import PreTrainedModel

FEW_ROWS = range(2, 33)  # row counts for which `project_rows` reorders the product (see there)


def project_rows(head: nn.Linear, states: torch.Tensor) -> torch.Tensor:
    """`head(states)`, computed as `(W @ states.T).T` when 2-32 rows meet the weight on the CPU at inference.

    Why: for a handful of rows this CPU's BLAS computes `states @ W.T` with a kernel that reads a row-major W at
    about half the speed of the one it picks for `W @ states.T`; at 1 row and from ~128 rows the two are equal. The
    vocabulary projection is the largest matmul of a decoding step, so batched decoding gains most here. A module
    with hooks (accelerate offloading, PEFT wrapping it) is called as is.
    """
    rows = states.numel() // states.shape[-1]
    weight = head.weight
    # Bounds compared, not `in`: under torch.compile with dynamic shapes `rows` is symbolic, and a range cannot
    # test membership of a symbol (a graph break that fullgraph=True turns into an error).
    if (
        states.device.type != "cpu"
        or not FEW_ROWS.start <= rows < FEW_ROWS.stop
        or type(head) is not nn.Linear
        or head._forward_hooks
        or head._forward_pre_hooks
        or "forward" in head.__dict__
        or not weight.is_contiguous()
        or (torch.is_grad_enabled() and (weight.requires_grad or states.requires_grad))
    ):
        return head(states)
    columns = states.reshape(rows, -1).t()
    product = torch.mm(weight, columns) if head.bias is None else torch.addmm(head.bias[:, None], weight, columns)
    return product.t().contiguous().view(*states.shape[:-1], -1)


def arrange_weights(model: nn.Module) -> None:
    """Lay the weights out in memory for the products the module's mode runs; shapes, names and files stay as they are.

    A projection that changes the width by 2x or more keeps its smaller dimension outermost in RAM in eval mode and
    its larger dimension outermost in training mode (`[out, in]` to every API either way):
    - Decoding one token per row, the CPU's matrix-vector product reads a widening weight 2-3x faster input-major
      and a narrowing one faster output-major; projections that widen less gain little, hence the 2x threshold.
    - Training, the weight gradient is a product shaped like the weight's RAM layout, and this CPU computes it
      faster with the larger dimension outermost. Optimizer state created in training mode has the training
      layout, and switching back from eval restores it. The price is a copy of the moved weights per mode switch,
      paid once per evaluation of a training run.
    - The output head stays row-major: tied, it is the embedding, whose row lookup needs it so; untied, its
      input-major gradient would cost training more than decoding gains.
    - Every parameter starts on a 64-byte boundary. A weight read from a safetensors file starts wherever the file
      puts it, and BLAS results can differ in the last bit with alignment; aligned, a reloaded model computes
      exactly what the saved one did.

    `.data` is swapped in place, so optimizers and PEFT keep their references. Only weights that own their whole
    storage move: views into a flat buffer (FSDP) or partitioned placeholders stay where their owner put them.
    """
    head = model.get_output_embeddings() if isinstance(model, PreTrainedModel) else None
    for module in model.modules():
        weight = getattr(module, "weight", None)
        if (
            type(module) is not nn.Linear
            or module is head
            or not weight.is_floating_point()
            or max(module.out_features, module.in_features) < 2 * min(module.out_features, module.in_features)
            or not _owns_storage(weight)
        ):
            continue
        widening = module.out_features > module.in_features
        # Input-major puts the input dimension outermost: wanted when it is the smaller one in eval, larger in training.
        wants_input_major = widening != module.training
        is_input_major = weight.stride() == (1, module.out_features)
        if wants_input_major and not is_input_major:
            weight.data = weight.data.t().contiguous().t()
        elif is_input_major and not wants_input_major:
            weight.data = weight.data.contiguous()
    for parameter in model.parameters():
        if parameter.data_ptr() % 64 and _owns_storage(parameter):
            parameter.data = parameter.data.clone()


def _owns_storage(parameter: torch.Tensor) -> bool:
    """A plain tensor that is its storage's only content (not a view into a flat buffer, not a tensor subclass)."""
    return (
        type(parameter.data) is torch.Tensor
        and parameter.untyped_storage().nbytes() == parameter.numel() * parameter.element_size()
    )


class ModeFollowingLayout:
    """Mixin for a `PreTrainedModel`: its weight layout follows its mode (see `arrange_weights`).

    Weights are arranged when the model is built, when a resize creates new ones, and when a mode switch changes
    some module's mode. That also arranges loaded weights, which arrive in their on-disk layout: `from_pretrained`
    ends in `eval()`. Trainer calls `train()` before every step, so a call that changes no module's mode arranges
    nothing.
    """

    def post_init(self) -> None:
        super().post_init()
        arrange_weights(self)

    def train(self, mode: bool = True):
        changes_mode = any(module.training != mode for module in self.modules())
        super().train(mode)
        if changes_mode:
            arrange_weights(self)
        return self

    def resize_token_embeddings(self, *args, **kwargs) -> nn.Embedding:
        # A resized untied head is a new `nn.Linear`, row-major until arranged like the rest.
        embeddings = super().resize_token_embeddings(*args, **kwargs)
        arrange_weights(self)
        return embeddings
