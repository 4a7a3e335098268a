"""DeBERTa-v2's convolution branch (He et al., 2021; the v2 xlarge and xxlarge checkpoints, `conv_kernel_size`): after
the first block, a 1-D convolution over the embeddings (padding zeroed), activated, is added to the block's output
and normed, giving the local n-gram features the paper adds beside attention.

A component file (`layers.COMPONENTS`): only checkpoints whose config has the branch carry it.
"""

import torch
from torch import nn
from transformers.activations import ACT2FN

from .layers import COMPONENTS, build_norm

__all__ = ["ConvolutionBranch"]


class ConvolutionBranch(nn.Module):
    """DeBERTa-v2's `ConvLayer`: conv (kernel `conv_kernel_size`, `conv_groups` groups) -> padding zeroed ->
    dropout -> `conv_activation`, added to the first block's output, then a norm; padding positions come out zero."""

    def __init__(self, config):
        super().__init__()
        kernel = config.conv_kernel_size
        self.conv = nn.Conv1d(
            config.hidden_size, config.hidden_size, kernel, padding=(kernel - 1) // 2, groups=config.conv_groups
        )
        self.act_fn = ACT2FN[config.conv_activation]
        self.norm = build_norm(config)
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(
        self, block_output: torch.Tensor, embeddings: torch.Tensor, attention_mask: torch.Tensor | None
    ) -> torch.Tensor:
        if attention_mask is None or attention_mask.dim() != 2:  # no padding (or a 4-D mask: no padding per token)
            attention_mask = torch.ones(embeddings.shape[:2], device=embeddings.device)
        keep = attention_mask.to(embeddings.dtype).unsqueeze(-1)
        # DeBERTa zeroes the padding's embeddings before its blocks; hfzoo's blocks never read them, its conv does.
        convolved = self.conv((embeddings * keep).transpose(1, 2)).transpose(1, 2)
        convolved = self.act_fn(self.dropout(convolved.masked_fill(keep == 0, 0)))
        return self.norm(block_output + convolved) * keep


COMPONENTS["deberta_convolution"] = ConvolutionBranch
