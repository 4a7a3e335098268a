"""ELMo's task-specific combination of a model's layers (Peters et al., 2018, equation 1), and a classifier on it.

    ELMo_k = gamma * sum_j s_j * h_{k,j},   s = softmax(w)

The weights `w` and the scale `gamma` are learned for each downstream task while the pretrained model stays
frozen; the paper also tries layer normalization of each layer before the weighting.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel
from transformers.modeling_outputs import SequenceClassifierOutput


class ScalarMix(nn.Module):
    """`gamma * sum_j softmax(w)_j * layer_j` over `num_layers` equally shaped layers.

    Args:
        num_layers: how many layers are mixed (a model's `len(hidden_states)`: embeddings + blocks).
        layer_norm: normalise each layer over its features (no learned affine) before weighting, as the paper does
            when the layers' scales differ.
    """

    def __init__(self, num_layers: int, layer_norm: bool = False):
        super().__init__()
        if num_layers < 1:
            raise ValueError(f"num_layers must be >= 1, got {num_layers}.")
        self.num_layers = num_layers
        self.layer_norm = layer_norm
        self.scalar_weights = nn.Parameter(torch.zeros(num_layers))  # softmax of zeros: an even mix to start
        self.gamma = nn.Parameter(torch.ones(()))

    def weights(self) -> torch.Tensor:
        """The normalised layer weights s_j (they sum to 1)."""
        return torch.softmax(self.scalar_weights, dim=0)

    def forward(self, layers: Sequence[torch.Tensor]) -> torch.Tensor:
        if len(layers) != self.num_layers:
            raise ValueError(
                f"ScalarMix was built for {self.num_layers} layers but got {len(layers)}; build it with "
                f"num_layers={len(layers)} (a model returns its embeddings plus one state per block)."
            )
        stacked = torch.stack(list(layers))
        if self.layer_norm:
            stacked = F.layer_norm(stacked, stacked.shape[-1:])
        weights = self.weights().to(stacked.dtype).view(-1, *[1] * (stacked.dim() - 1))
        return self.gamma.to(stacked.dtype) * (weights * stacked).sum(0)


def _hidden_states(model: PreTrainedModel, inputs: dict[str, torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """Every layer of `model` for `inputs`; an encoder-decoder contributes its encoder (it reads the whole input)."""
    if getattr(model.config, "is_encoder_decoder", False):
        model = model.get_encoder()
    outputs = model(**inputs, output_hidden_states=True, return_dict=True)
    if getattr(outputs, "hidden_states", None) is None:
        raise ValueError(
            f"{type(model).__name__} returned no hidden_states with output_hidden_states=True; ScalarMixClassifier "
            "needs a model that returns every layer."
        )
    return outputs.hidden_states


class ScalarMixClassifier(nn.Module):
    """A sequence classifier on the scalar mix of a pretrained model's layers, mean-pooled over the real tokens.

    Works on any transformers model that returns `hidden_states` (hfzoo's or native: an ELMo biLM, BERT, GPT-2...).
    The number and width of the layers are read from one probe forward pass, so nothing about the model has to be
    declared. With `freeze_base` the model is not trained and stays in eval mode (no dropout inside it, as ELMo
    used its biLM); only the mix, the dropout on the mixed features and the linear layer learn.

    Args:
        base_model: the pretrained model (bare or with its pretraining head).
        num_labels: classes; 1 means regression (mean squared error).
        freeze_base: keep the pretrained weights fixed.
        layer_norm: `ScalarMix`'s layer normalization.
        dropout: dropout on the pooled features before the linear layer.
    """

    def __init__(
        self,
        base_model: PreTrainedModel,
        num_labels: int,
        freeze_base: bool = True,
        layer_norm: bool = False,
        dropout: float = 0.1,
    ):
        super().__init__()
        if num_labels < 1:
            raise ValueError(f"num_labels must be >= 1 (1 = regression), got {num_labels}.")
        self.base_model = base_model
        self.num_labels = num_labels
        self.freeze_base = freeze_base
        if freeze_base:
            base_model.requires_grad_(False)
        layers = self._probe(base_model)
        self.mix = ScalarMix(len(layers), layer_norm=layer_norm)
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(layers[-1].shape[-1], num_labels)
        self.train()

    @staticmethod
    @torch.no_grad()
    def _probe(model: PreTrainedModel) -> tuple[torch.Tensor, ...]:
        was_training = model.training
        model.eval()
        token = torch.zeros(1, 1, dtype=torch.long, device=model.device)
        layers = _hidden_states(model, {"input_ids": token})
        model.train(was_training)
        return layers

    def train(self, mode: bool = True) -> ScalarMixClassifier:
        super().train(mode)
        if self.freeze_base:
            self.base_model.eval()
        return self

    def forward(
        self,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **model_inputs: torch.Tensor,
    ) -> SequenceClassifierOutput:
        """`model_inputs` (e.g. `token_type_ids`) go to the base model unchanged."""
        inputs = {"input_ids": input_ids, **model_inputs}
        if attention_mask is not None:
            inputs["attention_mask"] = attention_mask
        with torch.set_grad_enabled(torch.is_grad_enabled() and not self.freeze_base):
            layers = _hidden_states(self.base_model, inputs)
        mixed = self.mix(layers)
        if attention_mask is None:
            pooled = mixed.mean(1)
        else:
            keep = attention_mask[..., None].to(mixed.dtype)
            pooled = (mixed * keep).sum(1) / keep.sum(1).clamp(min=1)
        logits = self.classifier(self.dropout(pooled))
        loss = None
        if labels is not None:
            if self.num_labels == 1:
                loss = F.mse_loss(logits.squeeze(-1), labels.to(logits.dtype))
            else:
                loss = F.cross_entropy(logits, labels)
        return SequenceClassifierOutput(loss=loss, logits=logits, hidden_states=layers)
