"""What the recipe asks of a pretraining module that trains more than the model it keeps (ELECTRA's generator beside
its discriminator, SpanBERT's boundary head beside its masked LM): its size, and the kept model with its weights."""

from __future__ import annotations

import torch
from torch import nn


class PretrainingModule(nn.Module):
    """Subclasses name the attribute holding the kept model in `kept`; the recipe saves that model only."""

    kept: str

    def num_parameters(self) -> int:
        return sum(parameter.numel() for parameter in self.parameters())

    def kept_model(self, state_dict: dict[str, torch.Tensor] | None) -> tuple[nn.Module, dict | None]:
        """The kept model, with its entries of this module's `state_dict` (None where a process holds none)."""
        prefix = f"{self.kept}."
        if state_dict is not None:
            state_dict = {name[len(prefix) :]: value for name, value in state_dict.items() if name.startswith(prefix)}
        return getattr(self, self.kept), state_dict
