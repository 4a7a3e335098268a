"""Decoder-only family: GPT- and Llama-style causal transformers as native transformers models."""

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.cache_utils import Cache, DynamicCache
from transformers.masking_utils import create_causal_mask
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    MoeCausalLMOutputWithPast,
    MoeModelOutputWithPast,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.utils import can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .configuration_decoder import ZooDecoderConfig
from .layers import (
    InputEmbeddingsMixin,
    TransformerBlock,
    ZooPreTrainedModel,
    add_router_loss,
    build_norm,
    cache_argument,
    project_rows,
)


class ZooDecoderPreTrainedModel(ZooPreTrainedModel):
    config: ZooDecoderConfig
    _skip_keys_device_placement = ["past_key_values"]


class ZooDecoderModel(InputEmbeddingsMixin, ZooDecoderPreTrainedModel):
    """Token embedding, positions, causal blocks and (for pre-norm) a final norm; returns hidden states."""

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.build_input_layers(config, bidirectional=False)
        self.layers = nn.ModuleList(
            TransformerBlock(config, layer_idx, is_causal=True) for layer_idx in range(config.num_hidden_layers)
        )
        # Post-norm blocks already end in a norm; pre-norm stacks need one at the top.
        self.norm = build_norm(config) if config.norm_position == "pre" else nn.Identity()
        self.gradient_checkpointing = False
        self.post_init()

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPast:
        past_key_values = cache_argument(past_key_values, kwargs)
        use_cache = use_cache if use_cache is not None else self.config.use_cache
        if self.gradient_checkpointing and self.training:
            use_cache = False
        if use_cache and past_key_values is None:
            past_key_values = DynamicCache(config=self.config)

        past_length = past_key_values.get_seq_length() if past_key_values is not None else 0
        if position_ids is None and attention_mask is not None and attention_mask.dim() == 2:
            # Count real tokens only, so a left-padded row gets the positions it has alone (as generate does);
            # without this, learned/sinusoidal positions make a classifier's output depend on the padding.
            position_ids = (attention_mask.long().cumsum(-1) - 1).clamp(min=0)[:, past_length:]
        hidden_states, signals = self.embed_inputs(input_ids, inputs_embeds, position_ids, past_length)
        # The cache positionally: its keyword is `past_key_values` up to transformers 5.23, `cache` from 5.24.
        mask = create_causal_mask(self.config, hidden_states, attention_mask, past_key_values, position_ids=position_ids)
        for layer in self.layers:
            hidden_states = layer(hidden_states, mask, signals, past_key_values, **kwargs)
        output_cls = MoeModelOutputWithPast if self.config.num_experts else BaseModelOutputWithPast
        return output_cls(last_hidden_state=self.norm(hidden_states), past_key_values=past_key_values)


class ZooDecoderForCausalLM(ZooDecoderPreTrainedModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.model = ZooDecoderModel(config)
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        logits_to_keep: int | torch.Tensor = 0,
        **kwargs,
    ) -> CausalLMOutputWithPast:
        if self.config.num_experts:
            kwargs["output_router_logits"] = True
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        hidden_states = outputs.last_hidden_state
        # Only the positions asked for reach the vocabulary projection (generate asks for the last one).
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = project_rows(self.lm_head, hidden_states[:, keep, :])
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        loss, aux_loss = add_router_loss(self.config, loss, outputs)
        fields = dict(
            loss=loss,
            logits=logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )
        if aux_loss is None:
            return CausalLMOutputWithPast(**fields)
        return MoeCausalLMOutputWithPast(**fields, aux_loss=aux_loss, router_logits=outputs.router_logits)


class ZooDecoderForSequenceClassification(ZooDecoderPreTrainedModel):
    """Classifies from the last non-padding token, as GPT does with its extract token; needs `pad_token_id`."""

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ZooDecoderModel(config)
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        past_key_values: Cache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> SequenceClassifierOutputWithPast:
        if self.config.num_experts:
            kwargs["output_router_logits"] = True
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            past_key_values=past_key_values,
            inputs_embeds=inputs_embeds,
            use_cache=use_cache,
            **kwargs,
        )
        logits = self.score(outputs.last_hidden_state)
        batch_size = logits.shape[0]
        pad_token_id = self.config.pad_token_id
        if pad_token_id is None and batch_size != 1:
            raise ValueError(
                "ZooDecoderForSequenceClassification pools the last non-padding token and needs config.pad_token_id "
                "to find it in a batch; set pad_token_id (e.g. to the tokenizer's pad token id)."
            )
        if pad_token_id is None or input_ids is None:
            last_token = torch.full((batch_size,), -1, device=logits.device, dtype=torch.long)
        else:
            # Rightmost non-pad token: works for left and right padding alike.
            positions = torch.arange(input_ids.shape[-1], device=logits.device)
            last_token = (positions * (input_ids != pad_token_id).to(logits.device)).argmax(-1)
        pooled_logits = logits[torch.arange(batch_size, device=logits.device), last_token]
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, pooled_logits=pooled_logits, config=self.config)
        loss, _ = add_router_loss(self.config, loss, outputs)
        return SequenceClassifierOutputWithPast(
            loss=loss,
            logits=pooled_logits,
            past_key_values=outputs.past_key_values,
            hidden_states=outputs.hidden_states,
            attentions=outputs.attentions,
        )


class ZooDecoderForTokenClassification(ZooDecoderPreTrainedModel):
    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ZooDecoderModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.score = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        if self.config.num_experts:
            kwargs["output_router_logits"] = True
        outputs = self.model(
            input_ids=input_ids,
            attention_mask=attention_mask,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
            use_cache=False,
            **kwargs,
        )
        logits = self.score(self.dropout(outputs.last_hidden_state))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits, labels, self.config)
        loss, _ = add_router_loss(self.config, loss, outputs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


__all__ = [
    "ZooDecoderPreTrainedModel",
    "ZooDecoderModel",
    "ZooDecoderForCausalLM",
    "ZooDecoderForSequenceClassification",
    "ZooDecoderForTokenClassification",
]
