"""Bidirectional LSTM language model family: ELMo's biLM (Peters et al., 2018) as native transformers models.

Two LSTM stacks read the same token embeddings, one left to right, one right to left; neither ever sees the token
it predicts. The bare model returns every layer's representation (both directions concatenated), which is what ELMo
mixes for downstream tasks (`hfzoo.adapters.scalar_mix.ScalarMix`).

Padding: an LSTM carries its state across every position it reads, so a pad must never be read before a real token.
Each row's real tokens are gathered to the front (in order for the forward stack, reversed for the backward stack),
run, and scattered back; outputs therefore do not depend on the padding side or amount.
"""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.modeling_layers import GradientCheckpointingLayer
from transformers.modeling_outputs import BaseModelOutput
from transformers.utils import ModelOutput, can_return_tuple

from .configuration_bilm import ZooBiLMConfig
from .losses import masked_lm_loss
from .modeling_common import ZooPreTrainedModel

IGNORE_INDEX = -100


@dataclass
class BiLMOutput(ModelOutput):
    """Outputs of `ZooBiLMForPreTraining`.

    Args:
        loss: mean of the forward and backward language-model cross-entropies (with `labels`).
        forward_logits: `[batch, length, vocab]`; position t scores the token at t + 1 from the tokens up to t.
        backward_logits: `[batch, length, vocab]`; position t scores the token at t - 1 from the tokens from t on.
        hidden_states: the token layer and each biLSTM layer, `[batch, length, 2 * hidden_size]` each.
    """

    loss: torch.Tensor | None = None
    forward_logits: torch.Tensor | None = None
    backward_logits: torch.Tensor | None = None
    hidden_states: tuple[torch.Tensor, ...] | None = None


def _reading_orders(attention_mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """For each row, the positions the forward and backward stacks read, real tokens first, and the row's mask.

    The forward order lists the real positions left to right, the backward order right to left; pads follow. Both
    are permutations of the positions, so scattering the outputs back through them restores the input layout.
    """
    mask = attention_mask.bool()
    length = mask.shape[1]
    forward_order = torch.argsort((~mask).to(torch.int8), dim=1, stable=True)
    steps = torch.arange(length, device=mask.device).expand_as(forward_order)
    real = mask.sum(1, keepdim=True)
    reversed_steps = torch.where(steps < real, real - 1 - steps, steps)
    return forward_order, forward_order.gather(1, reversed_steps), mask


def _read(states: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    return states.gather(1, order[..., None].expand(-1, -1, states.shape[-1]))


def _put_back(states: torch.Tensor, order: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(states).scatter(1, order[..., None].expand(-1, -1, states.shape[-1]), states)


def layer_representations(
    embeddings: torch.Tensor,
    forward_layers: list[torch.Tensor],
    backward_layers: list[torch.Tensor],
    mask: torch.Tensor,
) -> tuple[torch.Tensor, ...]:
    """ELMo's layers: the token embedding repeated for both directions, then each layer's forward and backward
    states concatenated; zeros at pad positions."""
    keep = mask[..., None].to(embeddings.dtype)
    pairs = [(embeddings, embeddings), *zip(forward_layers, backward_layers)]
    return tuple(torch.cat(pair, dim=-1) * keep for pair in pairs)


class BiLSTMLayer(GradientCheckpointingLayer):
    """One layer of both directions: a projected LSTM each, in its own reading order, with ELMo's residual."""

    def __init__(self, config: ZooBiLMConfig, layer_idx: int):
        super().__init__()
        lstm = dict(input_size=config.hidden_size, hidden_size=config.cell_size, batch_first=True)
        self.forward_lstm = nn.LSTM(**lstm, proj_size=config.projection_size)
        self.backward_lstm = nn.LSTM(**lstm, proj_size=config.projection_size)
        self.residual = config.residual_connections and layer_idx > 0
        self.dropout = nn.Dropout(config.hidden_dropout)

    def forward(self, forward_states: torch.Tensor, backward_states: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        outputs = []
        for lstm, states in ((self.forward_lstm, forward_states), (self.backward_lstm, backward_states)):
            output, _ = lstm(self.dropout(states))
            outputs.append(output + states if self.residual else output)
        return outputs[0], outputs[1]


class ZooBiLMPreTrainedModel(ZooPreTrainedModel):
    """hfzoo's safetensors-only loading; no attention, so no attention backends (transformers' defaults)."""

    config: ZooBiLMConfig
    _no_split_modules = ["BiLSTMLayer"]
    _can_record_outputs = {}


class ZooBiLMModel(ZooBiLMPreTrainedModel):
    """Token embedding and the forward and backward LSTM stacks.

    Returns every layer: ELMo's representation of a token is a learned mix of all of them, so `hidden_states` is
    always filled (layer 0 is the token embedding, repeated for both directions as in ELMo), and
    `last_hidden_state` is the top layer. Pad positions are zeros.
    """

    def __init__(self, config: ZooBiLMConfig):
        super().__init__(config)
        self.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.layers = nn.ModuleList(BiLSTMLayer(config, layer_idx) for layer_idx in range(config.num_hidden_layers))
        self.gradient_checkpointing = False
        self.post_init()

    def directions(
        self, input_ids: torch.Tensor | None, attention_mask: torch.Tensor | None, inputs_embeds: torch.Tensor | None
    ) -> tuple[torch.Tensor, list[torch.Tensor], list[torch.Tensor], torch.Tensor]:
        """The embeddings, each layer's forward and backward states in input layout, and the mask of real tokens."""
        if (input_ids is None) == (inputs_embeds is None):
            raise ValueError("Pass exactly one of input_ids or inputs_embeds.")
        if inputs_embeds is None:
            inputs_embeds = self.embed_tokens(input_ids)
        if attention_mask is None:
            attention_mask = torch.ones(inputs_embeds.shape[:2], dtype=torch.long, device=inputs_embeds.device)
        forward_order, backward_order, mask = _reading_orders(attention_mask)
        embeddings = self.dropout(inputs_embeds)
        forward_states, backward_states = _read(embeddings, forward_order), _read(embeddings, backward_order)
        forward_layers, backward_layers = [], []
        for layer in self.layers:
            forward_states, backward_states = layer(forward_states, backward_states)
            forward_layers.append(_put_back(forward_states, forward_order))
            backward_layers.append(_put_back(backward_states, backward_order))
        return inputs_embeds, forward_layers, backward_layers, mask

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        output_hidden_states: bool | None = None,  # accepted for callers that ask: every layer is always returned
        inputs_embeds: torch.FloatTensor | None = None,
    ) -> BaseModelOutput:
        hidden_states = layer_representations(*self.directions(input_ids, attention_mask, inputs_embeds))
        return BaseModelOutput(last_hidden_state=hidden_states[-1], hidden_states=hidden_states)


def bidirectional_lm_loss(
    forward_logits: torch.Tensor,
    backward_logits: torch.Tensor,
    labels: torch.Tensor,
    mask: torch.Tensor,
    num_items_in_batch: torch.Tensor | int | None = None,
) -> torch.Tensor:
    """ELMo's objective: the mean of the forward LM's (position t predicts label t + 1) and the backward LM's
    (position t predicts label t - 1) cross-entropies; -100 labels and predictions from pad positions are skipped."""
    labels = labels.to(forward_logits.device)
    next_labels = F.pad(labels, (0, 1), value=IGNORE_INDEX)[:, 1:].masked_fill(~mask, IGNORE_INDEX)
    previous_labels = F.pad(labels, (1, 0), value=IGNORE_INDEX)[:, :-1].masked_fill(~mask, IGNORE_INDEX)
    vocab_size = forward_logits.shape[-1]
    forward_loss = masked_lm_loss(forward_logits, next_labels, vocab_size, num_items_in_batch)
    backward_loss = masked_lm_loss(backward_logits, previous_labels, vocab_size, num_items_in_batch)
    return (forward_loss + backward_loss) / 2


class ZooBiLMForPreTraining(ZooBiLMPreTrainedModel):
    """The biLM with its softmax: forward and backward next-token logits and ELMo's loss.

    Registered with `AutoModelForPreTraining`, transformers' class for a model with its pretraining heads (BERT's
    MLM + NSP). `AutoModelForCausalLM` would promise `generate`, which a model that reads the future of each token
    through its backward direction cannot offer; `AutoModelForMaskedLM` would promise that each position scores its
    own (masked) token. The features for downstream tasks come from the bare model (`AutoModel`).
    """

    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    pretrained_head = True

    def __init__(self, config: ZooBiLMConfig):
        super().__init__(config)
        self.model = ZooBiLMModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        output_hidden_states: bool | None = None,
        num_items_in_batch: torch.Tensor | int | None = None,
    ) -> BiLMOutput:
        embeddings, forward_layers, backward_layers, mask = self.model.directions(
            input_ids, attention_mask, inputs_embeds
        )
        forward_logits = self.lm_head(self.dropout(forward_layers[-1]))
        backward_logits = self.lm_head(self.dropout(backward_layers[-1]))
        loss = None
        if labels is not None:
            loss = bidirectional_lm_loss(forward_logits, backward_logits, labels, mask, num_items_in_batch)
        hidden_states = None
        if output_hidden_states if output_hidden_states is not None else self.config.output_hidden_states:
            hidden_states = layer_representations(embeddings, forward_layers, backward_layers, mask)
        return BiLMOutput(
            loss=loss, forward_logits=forward_logits, backward_logits=backward_logits, hidden_states=hidden_states
        )


# ELMo's features come from the bare model (AutoModel); the softmax that trains them is the pretraining head.
ZooBiLMPreTrainedModel.heads_by_auto_class = {
    "AutoModel": (ZooBiLMModel,),
    "AutoModelForPreTraining": (ZooBiLMForPreTraining,),
}

__all__ = ["ZooBiLMPreTrainedModel", "ZooBiLMModel", "ZooBiLMForPreTraining"]
