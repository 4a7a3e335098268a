"""The losses hfzoo models compute themselves: fused vocabulary cross-entropy (the mixture of experts' load-balancing
loss is `mixture_of_experts`'s).

The language-model losses of transformers, computed without keeping the log-probabilities: `F.cross_entropy` keeps
a `[tokens, vocab]` log-softmax for backward and allocates two more of that size there (the NLL gradient and the
log-softmax gradient). The gradient of the mean cross-entropy is `(softmax - one_hot) / n`, so backward needs only
the logits (which the model returns anyway) and one output tensor: a lower training peak and slightly faster steps
(see benchmarks/README.md). Values equal transformers' losses to fp32 rounding (tested).
"""

import torch
import torch.nn.functional as F
from torch.autograd.function import once_differentiable

CHUNK_BYTES = 1 << 22  # forward log-softmax per slice of rows this large: no full-size temporary


class VocabularyCrossEntropy(torch.autograd.Function):
    """Sum over valid rows of `-log_softmax(logits)[target]`, divided by `divisor`; computed in fp32."""

    @staticmethod
    def forward(ctx, logits: torch.Tensor, targets: torch.Tensor, valid: torch.Tensor, divisor: torch.Tensor):
        rows = max(1, CHUNK_BYTES // (4 * logits.shape[-1]))
        # Compiled, the kernels fuse (no full-size temporary to avoid) and the row count may be data-dependent
        # (the masked-LM head's labelled rows), which `split` cannot take: one chunk.
        chunks = [(logits, targets)] if torch.compiler.is_compiling() else zip(logits.split(rows), targets.split(rows))
        picked = torch.cat(
            [
                torch.log_softmax(chunk, -1, dtype=torch.float32).gather(1, chunk_targets[:, None]).squeeze(1)
                for chunk, chunk_targets in chunks
            ]
        )
        ctx.save_for_backward(logits, targets, valid, divisor)
        return -(picked * valid).sum() / divisor

    @staticmethod
    @once_differentiable
    def backward(ctx, grad_output: torch.Tensor):
        logits, targets, valid, divisor = ctx.saved_tensors
        scale = (grad_output / divisor) * valid
        grad = torch.softmax(logits, -1, dtype=torch.float32).mul_(scale[:, None])
        grad[torch.arange(len(targets), device=grad.device), targets] -= scale
        return grad.to(logits.dtype), None, None, None


def vocabulary_cross_entropy(
    logits: torch.Tensor,
    targets: torch.Tensor,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
) -> torch.Tensor:
    """transformers' `fixed_cross_entropy` on `[tokens, vocab]` logits: the mean over targets that are not
    `ignore_index`, or their sum divided by `num_items_in_batch` when given (gradient accumulation)."""
    targets = targets.to(logits.device)
    valid = targets != ignore_index
    safe_targets = targets.masked_fill(~valid, 0)
    out_of_range = valid & ((targets < 0) | (targets >= logits.shape[-1]))
    # A compiled graph cannot branch on a tensor's value: compiled, the check is left to eager runs.
    if not torch.compiler.is_compiling() and out_of_range.any():
        position = int(out_of_range.nonzero()[0, 0])
        raise ValueError(
            f"Label {int(targets[position])} at flattened position {position} is not a token id of the vocabulary "
            f"(0 to {logits.shape[-1] - 1}) nor the ignore index {ignore_index}."
        )
    if num_items_in_batch is None:
        divisor = valid.sum()
    else:
        divisor = torch.as_tensor(num_items_in_batch, device=logits.device)
    return VocabularyCrossEntropy.apply(logits, safe_targets, valid.to(torch.float32), divisor.to(torch.float32))


def masked_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    vocab_size: int,
    num_items_in_batch: torch.Tensor | int | None = None,
    ignore_index: int = -100,
    **kwargs,
) -> torch.Tensor:
    """transformers' `ForMaskedLMLoss`, fused: each position predicts its own label."""
    return vocabulary_cross_entropy(logits.reshape(-1, vocab_size), labels.reshape(-1), num_items_in_batch, ignore_index)


def causal_lm_loss(
    logits: torch.Tensor,
    labels: torch.Tensor,
    vocab_size: int,
    ignore_index: int = -100,
    shift_labels: torch.Tensor | None = None,
    **kwargs,
) -> torch.Tensor:
    """transformers' `ForCausalLMLoss`, fused: position t predicts label t + 1 (or `shift_labels` t when given).

    `kwargs` carry `num_items_in_batch` on to `masked_lm_loss`, which scores the shifted labels in place.
    """
    if shift_labels is None:
        shift_labels = F.pad(labels, (0, 1), value=ignore_index)[..., 1:]
    return masked_lm_loss(logits, shift_labels, vocab_size, ignore_index=ignore_index, **kwargs)


VOCABULARY_LOSSES = {"ForCausalLM": causal_lm_loss, "ForMaskedLM": masked_lm_loss}
