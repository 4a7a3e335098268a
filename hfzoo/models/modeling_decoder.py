"""Decoder-only family: GPT- and Llama-style causal transformers as native transformers models.

The task heads do what transformers' `GenericForSequenceClassification`, `GenericForTokenClassification` and
`GenericForQuestionAnswering` do (the same layers, weight names and losses) without being built on them: those build
their base with `AutoModel.from_config`, which raises in a checkpoint loaded as remote code where hfzoo is absent (the
remote config has no `AutoModel` there, so transformers asks again for `trust_remote_code`), and their `forward` reads
only the base's hidden states, so a mixture of experts' load-balancing loss could not join the task loss.
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
    MultipleChoiceModelOutput,
    QuestionAnsweringModelOutput,
    SequenceClassifierOutputWithPast,
    TokenClassifierOutput,
)
from transformers.utils import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .compat import CACHE_FIELD, output_cache
from .configuration_decoder import ZooDecoderConfig
from .transformer_stack import TransformerStack, ZooTransformerPreTrainedModel, add_router_loss


class ZooDecoderPreTrainedModel(ZooTransformerPreTrainedModel):
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
    """What the decoder's heads share: the decoder, and how an output is assembled (`task_output`). The task heads
    also share `forward` (run the decoder, then `head` gives the loss and the output's logits fields); the language
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
        loss, logits = self.head(outputs.last_hidden_state, labels, input_ids)
        return self.task_output(outputs, loss, **logits)

    def head(
        self, hidden_states: torch.Tensor, targets, input_ids: torch.Tensor | None
    ) -> tuple[torch.Tensor | None, dict[str, torch.Tensor]]:
        """A task head's loss (given `targets`, else None) and its output's logits fields by name."""
        raise NotImplementedError

    def returns_cache(self) -> bool:
        return CACHE_FIELD in self.output_cls.__dataclass_fields__

    def task_output(self, outputs: ModelOutput, loss: torch.Tensor | None, **logits: torch.Tensor) -> ModelOutput:
        """The head's output, with its `logits` fields: the MoE load-balancing loss joins the task loss; cache and
        recorded states pass on."""
        loss, aux_loss = add_router_loss(self.config, loss, outputs)
        fields = dict(loss=loss, **logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions)
        if self.returns_cache():
            fields[CACHE_FIELD] = output_cache(outputs)
        if aux_loss is None or self.moe_output_cls is None:
            return self.output_cls(**fields)
        return self.moe_output_cls(**fields, aux_loss=aux_loss, router_logits=outputs.router_logits)

    def at_last_token(self, states: torch.Tensor, input_ids: torch.Tensor | None) -> torch.Tensor:
        """`states` (`[batch, seq, ...]`) at each row's last non-padding position, where the sequence-level heads read
        the decoder (it has seen the whole row there); the last position without input ids or without padding.
        Needs `pad_token_id` to batch."""
        batch_size, device = states.shape[0], states.device
        pad_token_id = self.config.pad_token_id
        if pad_token_id is None and batch_size != 1:
            raise ValueError(
                f"{type(self).__name__} pools the last non-padding token and needs config.pad_token_id to find it in "
                "a batch; set pad_token_id (e.g. to the tokenizer's pad token id)."
            )
        if pad_token_id is None or input_ids is None:
            last_token = torch.full((batch_size,), -1, device=device, dtype=torch.long)
        else:
            # Rightmost non-pad token: works for left and right padding alike.
            positions = torch.arange(input_ids.shape[-1], device=device)
            last_token = (positions * (input_ids != pad_token_id).to(device)).argmax(-1)
        return states[torch.arange(batch_size, device=device), last_token]


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
        logits = self.lm_head(hidden_states[:, keep, :])
        if self.config.logit_softcap is not None:
            logits = self.config.logit_softcap * torch.tanh(logits / self.config.logit_softcap)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return self.task_output(outputs, loss, logits=logits)


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
        pooled_logits = self.at_last_token(logits, input_ids)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, pooled_logits=pooled_logits, config=self.config)
        return loss, dict(logits=pooled_logits)


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
        return None if labels is None else self.loss_function(logits, labels, self.config), dict(logits=logits)


class ZooDecoderForQuestionAnswering(ZooDecoderTaskModel):
    """Extractive QA (GPT-2's and Llama's QA heads): start and end logits per token from the causal hidden states.

    Each token sees only its left context, so put the question before the context. Targets are `start_positions` /
    `end_positions`; positions outside the sequence are ignored, and the loss averages the two cross-entropies.
    """

    output_cls = QuestionAnsweringModelOutput

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        position_ids: torch.LongTensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        # Named here so that Trainer and the QA pipeline see them; both travel on as the head's targets.
        targets = (start_positions, end_positions)
        return super().forward(input_ids, attention_mask, position_ids, None, inputs_embeds, targets, **kwargs)

    def head(self, hidden_states, targets, input_ids):
        start_logits, end_logits, loss = self.answer_span(hidden_states, *targets)
        return loss, dict(start_logits=start_logits, end_logits=end_logits)


class ZooDecoderForMultipleChoice(ZooDecoderTaskModel):
    """Scores each of `num_choices` (prompt + choice) sequences, inputs shaped `[batch, num_choices, seq]` (SWAG).

    Each choice is decoded as its own sequence and scored from its last non-padding token, as the sequence
    classifier reads it (so `pad_token_id` must be set); a softmax over the choices gives the cross-entropy loss
    against `labels` (the index of the right choice).
    """

    output_cls = MultipleChoiceModelOutput

    def __init__(self, config: ZooDecoderConfig):
        super().__init__(config)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.score = nn.Linear(config.hidden_size, 1)
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
    ) -> MultipleChoiceModelOutput:
        num_choices = (input_ids if input_ids is not None else inputs_embeds).shape[1]
        flat = [None if x is None else x.flatten(0, 1) for x in (input_ids, attention_mask, position_ids, inputs_embeds)]
        outputs = self.base_model_outputs(flat[0], flat[1], flat[2], None, flat[3], False, **kwargs)
        pooled = self.at_last_token(outputs.last_hidden_state, flat[0])
        logits = self.score(self.dropout(pooled)).view(-1, num_choices)
        # transformers has no shared multiple-choice loss; its heads use plain cross-entropy over the choices.
        loss = None if labels is None else nn.functional.cross_entropy(logits, labels.to(logits.device))
        return self.task_output(outputs, loss, logits=logits)


ZooDecoderPreTrainedModel.heads_by_auto_class = {
    "AutoModel": (ZooDecoderModel,),
    "AutoModelForCausalLM": (ZooDecoderForCausalLM,),
    "AutoModelForSequenceClassification": (ZooDecoderForSequenceClassification,),
    "AutoModelForTokenClassification": (ZooDecoderForTokenClassification,),
    "AutoModelForQuestionAnswering": (ZooDecoderForQuestionAnswering,),
    "AutoModelForMultipleChoice": (ZooDecoderForMultipleChoice,),
}

__all__ = [
    "ZooDecoderPreTrainedModel",
    "ZooDecoderModel",
    "ZooDecoderForCausalLM",
    "ZooDecoderForSequenceClassification",
    "ZooDecoderForTokenClassification",
    "ZooDecoderForQuestionAnswering",
    "ZooDecoderForMultipleChoice",
]
