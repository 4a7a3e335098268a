"""Decoder-only family: GPT- and Llama-style causal transformers as native transformers models.

The classification heads are hfzoo's own rather than transformers' `GenericForSequenceClassification` /
`GenericForTokenClassification`: those build the base with `AutoModel.from_config`, which fails where a checkpoint
runs as remote code without hfzoo (the remote config class is registered with no Auto class there), and they would
drop a mixture of experts' load-balancing loss.
"""

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.cache_utils import Cache, DynamicCache
from transformers.modeling_outputs import (
    BaseModelOutputWithPast,
    CausalLMOutputWithPast,
    MoeCausalLMOutputWithPast,
    MoeModelOutputWithPast,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .compat import CACHE_FIELD, output_cache
from .configuration_decoder import ZooDecoderConfig
from .losses import add_router_loss
from .modeling_common import TransformerStack, ZooPreTrainedModel
from .weight_layout import project_rows


class ZooDecoderPreTrainedModel(ZooPreTrainedModel):
    config: ZooDecoderConfig
    _skip_keys_device_placement = ["past_key_values"]


class ZooDecoderModel(TransformerStack, ZooDecoderPreTrainedModel):
    """Token embedding, positions, causal blocks and (for pre-norm) a final norm; returns hidden states."""

    positions_skip_padding = True

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.build_inputs(config, is_causal=True)
        self.build_blocks(config, config.num_hidden_layers)
        self.post_init()

    def new_cache(self) -> DynamicCache:
        return DynamicCache(config=self.config)

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
        past_key_values = self.cache_to_fill(past_key_values, use_cache, kwargs)
        hidden_states = self.run_stack(input_ids, inputs_embeds, attention_mask, position_ids, past_key_values, **kwargs)
        output_cls = MoeModelOutputWithPast if self.config.num_experts else BaseModelOutputWithPast
        return output_cls(last_hidden_state=hidden_states, **{CACHE_FIELD: past_key_values})


class ZooDecoderTaskModel(ZooDecoderPreTrainedModel):
    """What the decoder's heads share: the decoder, and how an output is assembled (`task_output`). The
    classification heads also share `forward` (run the decoder, then `head` gives logits and loss); the language
    model keeps its own, whose extra parameters (`logits_to_keep`) generate looks for in its signature."""

    output_cls: type[ModelOutput]  # the head's output class
    moe_output_cls: type[ModelOutput] | None = None  # for a mixture of experts, if the head reports its aux loss

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.model = ZooDecoderModel(config)

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
    ) -> ModelOutput:
        if not self.returns_cache():
            use_cache = False
        # Positional, in the order of ZooDecoderModel.forward's parameters.
        outputs = self.base_model_outputs(
            input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, use_cache, **kwargs
        )
        logits, loss = self.head(outputs.last_hidden_state, labels, input_ids)
        return self.task_output(outputs, logits, loss)

    def head(
        self, hidden_states: torch.Tensor, labels: torch.Tensor | None, input_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """A classification head's logits and, with `labels`, its loss."""
        raise NotImplementedError

    def returns_cache(self) -> bool:
        return CACHE_FIELD in self.output_cls.__dataclass_fields__

    def task_output(self, outputs: ModelOutput, logits: torch.Tensor, loss: torch.Tensor | None) -> ModelOutput:
        """The head's output: the MoE load-balancing loss joins the task loss; cache and recorded states pass on."""
        loss, aux_loss = add_router_loss(self.config, loss, outputs)
        fields = dict(loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        if self.returns_cache():
            fields[CACHE_FIELD] = output_cache(outputs)
        if aux_loss is None or self.moe_output_cls is None:
            return self.output_cls(**fields)
        return self.moe_output_cls(**fields, aux_loss=aux_loss, router_logits=outputs.router_logits)


class ZooDecoderForCausalLM(ZooDecoderTaskModel, GenerationMixin):
    _tied_weights_keys = {"lm_head.weight": "model.embed_tokens.weight"}
    output_cls = CausalLMOutputWithPast
    moe_output_cls = MoeCausalLMOutputWithPast
    pretrained_head = True

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
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
        # Positional, in the order of ZooDecoderModel.forward's parameters.
        outputs = self.base_model_outputs(
            input_ids, attention_mask, position_ids, past_key_values, inputs_embeds, use_cache, **kwargs
        )
        hidden_states = outputs.last_hidden_state
        # Only the positions asked for reach the vocabulary projection (generate asks for the last one).
        keep = slice(-logits_to_keep, None) if isinstance(logits_to_keep, int) else logits_to_keep
        logits = project_rows(self.lm_head, hidden_states[:, keep, :])
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return self.task_output(outputs, logits, loss)


class ZooDecoderForSequenceClassification(ZooDecoderTaskModel):
    """Classifies from the last non-padding token, as GPT does with its extract token; needs `pad_token_id`."""

    output_cls = SequenceClassifierOutputWithPast

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.score = nn.Linear(config.hidden_size, config.num_labels, bias=False)
        self.post_init()

    def head(self, hidden_states, labels, input_ids):
        logits = self.score(hidden_states)
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
        if labels is None:
            return pooled_logits, None
        return pooled_logits, self.loss_function(
            logits=logits, labels=labels, pooled_logits=pooled_logits, config=self.config
        )


class ZooDecoderForTokenClassification(ZooDecoderTaskModel):
    """Tags every token from the causal hidden state (each token sees only its left context); -100 is ignored."""

    output_cls = TokenClassifierOutput

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.score = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    def head(self, hidden_states, labels, input_ids):
        logits = self.score(self.dropout(hidden_states))
        return logits, None if labels is None else self.loss_function(logits, labels, self.config)


ZooDecoderPreTrainedModel.heads_by_auto_class = {
    "AutoModel": (ZooDecoderModel,),
    "AutoModelForCausalLM": (ZooDecoderForCausalLM,),
    "AutoModelForSequenceClassification": (ZooDecoderForSequenceClassification,),
    "AutoModelForTokenClassification": (ZooDecoderForTokenClassification,),
}

__all__ = [
    "ZooDecoderPreTrainedModel",
    "ZooDecoderModel",
    "ZooDecoderForCausalLM",
    "ZooDecoderForSequenceClassification",
    "ZooDecoderForTokenClassification",
]
