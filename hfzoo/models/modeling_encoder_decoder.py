"""Encoder-decoder family: the original Transformer, T5 and BART as native transformers seq2seq models.

Both stacks are built from the shared blocks in `layers.py`: the encoder from bidirectional blocks, the decoder
from causal blocks with cross-attention. Each stack is its own `PreTrainedModel`, as in transformers' BART and T5,
so `get_encoder()` hands generate a module it can call with `input_ids`, and output capture keeps the encoder's and
the decoder's hidden states and attentions apart.
"""

import torch
from torch import nn
from transformers import GenerationMixin
from transformers.cache_utils import DynamicCache, EncoderDecoderCache
from transformers.modeling_outputs import (
    BaseModelOutput, BaseModelOutputWithPastAndCrossAttentions, MoEModelOutput,
    MoEModelOutputWithPastAndCrossAttentions, Seq2SeqLMOutput, Seq2SeqModelOutput, Seq2SeqMoEModelOutput,
    Seq2SeqMoEOutput, Seq2SeqQuestionAnsweringModelOutput, Seq2SeqSequenceClassifierOutput, TokenClassifierOutput,
)  # fmt: skip
from transformers.utils import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import OutputRecorder, capture_outputs

from .compat import CACHE_FIELD, cache_argument, output_cache
from .configuration_encoder_decoder import ZooEncoderDecoderConfig
from .layers import Attention, RoutedFeedForward, TransformerBlock
from .transformer_stack import TransformerStack, ZooTransformerPreTrainedModel, add_router_loss


def shift_tokens_right(labels: torch.Tensor, pad_token_id: int, decoder_start_token_id: int) -> torch.Tensor:
    """Teacher forcing input: the target shifted one step right behind the start token.

    -100 marks label positions the loss ignores; it is no token, so the decoder reads `pad_token_id` there.
    """
    shifted = labels.new_full(labels.shape, pad_token_id)
    shifted[:, 0] = decoder_start_token_id
    shifted[:, 1:] = labels[:, :-1]
    return shifted.masked_fill(shifted == -100, pad_token_id)


class ZooEncoderDecoderPreTrainedModel(ZooTransformerPreTrainedModel):
    config: ZooEncoderDecoderConfig
    _skip_keys_device_placement = ["past_key_values"]
    # T5's relative bias reaches the kernel as `position_bias`: flash attention ignores it and flex attention fails
    # on its broadcast batch dimension, so only eager and sdpa are offered.
    _supports_flash_attn = False
    _supports_flex_attn = False

    def resize_token_embeddings(
        self, new_num_tokens: int | None = None, pad_to_multiple_of: int | None = None, mean_resizing: bool = True
    ) -> nn.Embedding:
        """Resize the target embedding and the LM head as transformers does, and an unshared source embedding too."""
        embeddings = super().resize_token_embeddings(new_num_tokens, pad_to_multiple_of, mean_resizing)
        encoder = self.get_encoder()
        if encoder.embed_tokens.num_embeddings != embeddings.num_embeddings:
            encoder.embed_tokens = self._get_resized_embeddings(
                encoder.embed_tokens, embeddings.num_embeddings, mean_resizing=mean_resizing
            )
        return embeddings


class Seq2SeqStack(TransformerStack, ZooEncoderDecoderPreTrainedModel):
    """What both stacks are made of: input embeddings, shared blocks and, for pre-norm, a final norm.

    A decoder stack (`is_decoder`) is causal and cross-attends; its depth is the config field `depth_field`.
    """

    is_decoder: bool
    depth_field: str

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        self.build_inputs(config, is_causal=self.is_decoder)
        self.build_blocks(config, getattr(config, self.depth_field), has_cross_attention=self.is_decoder)
        self.post_init()


class ZooSeq2SeqEncoder(Seq2SeqStack):
    """The encoder stack: bidirectional blocks over the source. `get_encoder()` returns it to generate.

    It records hidden states, attentions and router logits as every hfzoo stack does (`ZooTransformerPreTrainedModel`).
    """

    is_decoder = False
    depth_field = "num_hidden_layers"
    positions_skip_padding = True  # a padded source row (left or right) gets the positions it has alone
    # generate runs the encoder with every model keyword not meant for the decoder, `labels` included (as
    # Seq2SeqTrainer's predict_with_generate passes them).
    also_passed_through = frozenset({"labels"})

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        hidden_states = self.run_stack(input_ids, inputs_embeds, attention_mask, **kwargs)
        output_cls = MoEModelOutput if self.config.num_experts else BaseModelOutput
        return output_cls(last_hidden_state=hidden_states)


class ZooSeq2SeqDecoder(Seq2SeqStack):
    """The decoder stack: causal blocks over the target that cross-attend to the encoder's output."""

    is_decoder = True
    depth_field = "num_decoder_layers"
    _can_record_outputs = {
        "hidden_states": OutputRecorder(TransformerBlock, num_hidden_layers_key="num_decoder_layers"),
        "attentions": OutputRecorder(Attention, index=1, layer_name="self_attn"),
        "cross_attentions": OutputRecorder(Attention, index=1, layer_name="cross_attn"),
        "router_logits": OutputRecorder(RoutedFeedForward, index=1),
    }

    def new_cache(self) -> EncoderDecoderCache:
        # Sized from the decoder's view of the config: one cache layer per decoder block.
        decoder_config = self.config.get_text_config(decoder=True)
        return EncoderDecoderCache(DynamicCache(config=decoder_config), DynamicCache(config=decoder_config))

    @capture_outputs
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_hidden_states: torch.FloatTensor | None = None,
        encoder_attention_mask: torch.Tensor | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> BaseModelOutputWithPastAndCrossAttentions:
        past_key_values = self.cache_to_fill(past_key_values, use_cache, kwargs)
        if past_key_values is not None and not isinstance(past_key_values, EncoderDecoderCache):
            raise ValueError(
                f"The decoder caches self- and cross-attention separately: pass an EncoderDecoderCache, not "
                f"{type(past_key_values).__name__} (or leave past_key_values unset and let the model create one)."
            )
        hidden_states = self.run_stack(
            input_ids, inputs_embeds, attention_mask, past_key_values=past_key_values,
            encoder_hidden_states=encoder_hidden_states, encoder_attention_mask=encoder_attention_mask, **kwargs,
        )  # fmt: skip
        output_cls = BaseModelOutputWithPastAndCrossAttentions
        if self.config.num_experts:
            output_cls = MoEModelOutputWithPastAndCrossAttentions
        return output_cls(last_hidden_state=hidden_states, **{CACHE_FIELD: past_key_values})


class SharedEmbeddingTies:
    """Mixin for the bare models: their `_tied_weights_keys` tie the source and target embeddings, applied when
    `share_embeddings` is on, whatever `tie_word_embeddings` says.

    transformers applies a model's `_tied_weights_keys` only when `tie_word_embeddings` is on; here that switch
    governs the LM head alone, since T5 v1.1 shares the embedding between the stacks but unties the head.
    """

    def get_expanded_tied_weights_keys(self, all_submodels: bool = False) -> dict:
        if all_submodels:
            return super().get_expanded_tied_weights_keys(all_submodels=True)
        return dict(self._tied_weights_keys) if self.config.share_embeddings else {}


class ZooEncoderDecoderModel(SharedEmbeddingTies, ZooEncoderDecoderPreTrainedModel):
    """Encoder stack + decoder stack; returns the decoder's last hidden state beside the encoder's."""

    # With `share_embeddings` the source embedding is the target one (see `get_expanded_tied_weights_keys`).
    _tied_weights_keys = {"encoder.embed_tokens.weight": "decoder.embed_tokens.weight"}

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        self.encoder = ZooSeq2SeqEncoder(config)
        self.decoder = ZooSeq2SeqDecoder(config)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        """The target embedding: the one the LM head ties to, and the only one with `share_embeddings`."""
        return self.decoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.decoder.embed_tokens = value
        if self.config.share_embeddings:
            self.encoder.embed_tokens = value

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        decoder_inputs_embeds: torch.FloatTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        past_key_values = cache_argument(past_key_values, kwargs)  # before kwargs reach the encoder
        if decoder_input_ids is None and decoder_inputs_embeds is None:
            raise ValueError(
                "Pass decoder_input_ids (or decoder_inputs_embeds); to train on targets, pass them as `labels` to "
                "ZooEncoderDecoderForConditionalGeneration, which shifts them right behind decoder_start_token_id."
            )
        if self.config.num_experts:
            # The heads add the load-balancing loss, so the routers' logits are always recorded.
            kwargs["output_router_logits"] = True
        if encoder_outputs is None:
            encoder_outputs = self.encoder(
                input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs
            )
        elif not isinstance(encoder_outputs, ModelOutput):
            encoder_outputs = BaseModelOutput(last_hidden_state=encoder_outputs[0])
        decoder_outputs = self.decoder(
            input_ids=decoder_input_ids, attention_mask=decoder_attention_mask,
            encoder_hidden_states=encoder_outputs.last_hidden_state, encoder_attention_mask=attention_mask,
            past_key_values=past_key_values, inputs_embeds=decoder_inputs_embeds, use_cache=use_cache, **kwargs,
        )  # fmt: skip
        fields = dict(
            last_hidden_state=decoder_outputs.last_hidden_state,
            **{CACHE_FIELD: output_cache(decoder_outputs)},
            decoder_hidden_states=decoder_outputs.hidden_states,
            decoder_attentions=decoder_outputs.attentions,
            cross_attentions=decoder_outputs.cross_attentions,
            encoder_last_hidden_state=encoder_outputs.last_hidden_state,
            encoder_hidden_states=encoder_outputs.get("hidden_states"),
            encoder_attentions=encoder_outputs.get("attentions"),
        )
        if not self.config.num_experts:
            return Seq2SeqModelOutput(**fields)
        return Seq2SeqMoEModelOutput(
            **fields,
            encoder_router_logits=encoder_outputs.get("router_logits"),
            decoder_router_logits=decoder_outputs.router_logits,
        )


class ZooEncoderDecoderEncoderModel(SharedEmbeddingTies, ZooEncoderDecoderPreTrainedModel):
    """The encoder stack alone, as transformers' `T5EncoderModel`: what a source-tagging head (and a text encoder
    for other models) reads. Its weights are named as in the whole model (`encoder.*`), so a seq2seq checkpoint's
    encoder loads into it and its decoder is left out (ignored on load, as `T5EncoderModel` ignores it).

    With `share_embeddings` a seq2seq checkpoint stores the shared embedding once, as the decoder's (the LM head's
    tie); `decoder.embed_tokens` is kept here as a tied alias of the encoder's embedding so that it loads.
    """

    _keys_to_ignore_on_load_unexpected = [r"(^|\.)decoder\."]
    _tied_weights_keys = {"decoder.embed_tokens.weight": "encoder.embed_tokens.weight"}

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        self.encoder = ZooSeq2SeqEncoder(config)
        if config.share_embeddings:
            self.decoder = nn.Module()
            self.decoder.embed_tokens = nn.Embedding(config.vocab_size, config.hidden_size)
        self.post_init()

    def get_input_embeddings(self) -> nn.Embedding:
        return self.encoder.embed_tokens

    def set_input_embeddings(self, value: nn.Embedding) -> None:
        self.encoder.embed_tokens = value
        if self.config.share_embeddings:
            self.decoder.embed_tokens = value

    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        **kwargs,
    ) -> BaseModelOutput:
        return self.encoder(input_ids=input_ids, attention_mask=attention_mask, inputs_embeds=inputs_embeds, **kwargs)


class ZooEncoderDecoderTaskModel(ZooEncoderDecoderPreTrainedModel):
    """What the heads on the whole model share: the bare model, BART's reading of the source for classification and
    QA (`decode_shifted_source`), and how an output is assembled (`task_output`)."""

    output_cls: type[ModelOutput]  # the head's output class
    moe_output_cls: type[ModelOutput] | None = None  # for a mixture of experts, if the head reports its aux losses
    # What every such head returns as the bare model gave it: the cache and both stacks' recorded states.
    passed_on = (
        CACHE_FIELD, "decoder_hidden_states", "decoder_attentions", "cross_attentions",
        "encoder_last_hidden_state", "encoder_hidden_states", "encoder_attentions",
    )  # fmt: skip

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        self.model = ZooEncoderDecoderModel(config)

    def decode_shifted_source(
        self,
        input_ids: torch.LongTensor | None,
        attention_mask: torch.Tensor | None,
        encoder_outputs: ModelOutput | tuple | None,
        **kwargs,
    ) -> Seq2SeqModelOutput:
        """BART's reading for its classification and QA heads: the source feeds the encoder and, shifted right
        behind `decoder_start_token_id`, the decoder, so each decoder state has read the whole source."""
        if input_ids is None:
            raise ValueError(f"{type(self).__name__} feeds input_ids, shifted, to the decoder; pass them.")
        decoder_input_ids = shift_tokens_right(input_ids, self.config.pad_token_id, self.config.decoder_start_token_id)
        return self.model(
            input_ids, attention_mask, decoder_input_ids, encoder_outputs=encoder_outputs, use_cache=False, **kwargs
        )

    def task_output(self, outputs: ModelOutput, loss: torch.Tensor | None, **logits: torch.Tensor) -> ModelOutput:
        """The head's output, with its `logits` fields: the cache and the stacks' recorded states pass on
        (`passed_on`); with a mixture of experts each stack's load-balancing loss joins `loss`, as in the Switch
        Transformer, and is reported beside its router logits where the head has a `moe_output_cls`. A stack whose
        router logits were not recorded (encoder outputs that generate computed) adds none."""
        fields, router_fields = {name: outputs.get(name) for name in self.passed_on}, {}
        for stack in ("encoder", "decoder") if self.config.num_experts else ():
            router_logits = router_fields[f"{stack}_router_logits"] = outputs.get(f"{stack}_router_logits")
            router_fields[f"{stack}_aux_loss"] = None
            if router_logits:
                stack_outputs = MoEModelOutput(router_logits=router_logits)
                loss, router_fields[f"{stack}_aux_loss"] = add_router_loss(self.config, loss, stack_outputs)
        if router_fields and self.moe_output_cls is not None:
            return self.moe_output_cls(loss=loss, **logits, **fields, **router_fields)
        return self.output_cls(loss=loss, **logits, **fields)


class ZooEncoderDecoderForConditionalGeneration(ZooEncoderDecoderTaskModel, GenerationMixin):
    """Seq2seq language model: `labels` in, token-level cross-entropy out; `generate()` decodes with a cache."""

    _tied_weights_keys = {"lm_head.weight": "model.decoder.embed_tokens.weight"}
    output_cls = Seq2SeqLMOutput
    moe_output_cls = Seq2SeqMoEOutput
    pretrained_head = True

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        # Labels are already aligned with the decoder positions (the shift happens on the input side): no loss shift.
        self.loss_type = "ForMaskedLM"
        self.lm_head = nn.Linear(config.hidden_size, config.vocab_size, bias=False)
        self.post_init()

    def prepare_decoder_input_ids_from_labels(self, labels: torch.Tensor) -> torch.Tensor:
        """Used by `DataCollatorForSeq2Seq` to build `decoder_input_ids` in the data loader."""
        return shift_tokens_right(labels, self.config.pad_token_id, self.config.decoder_start_token_id)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        decoder_input_ids: torch.LongTensor | None = None,
        decoder_attention_mask: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        past_key_values: EncoderDecoderCache | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        decoder_inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        use_cache: bool | None = None,
        **kwargs,
    ) -> Seq2SeqLMOutput:
        if labels is not None:
            use_cache = False  # teacher forcing reads the whole target at once: nothing to cache
            if decoder_input_ids is None and decoder_inputs_embeds is None:
                decoder_input_ids = self.prepare_decoder_input_ids_from_labels(labels)
        # Positional, in the order of ZooEncoderDecoderModel.forward's parameters (the same as this signature's).
        outputs = self.model(
            input_ids, attention_mask, decoder_input_ids, decoder_attention_mask, encoder_outputs, past_key_values,
            inputs_embeds, decoder_inputs_embeds, use_cache, **kwargs,
        )
        logits = self.lm_head(outputs.last_hidden_state)
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, vocab_size=self.config.vocab_size, **kwargs)
        return self.task_output(outputs, loss, logits=logits)


class ZooEncoderDecoderForSequenceClassification(ZooEncoderDecoderTaskModel):
    """BART's classifier: the source feeds the encoder and, shifted right, the decoder; the decoder state at each
    row's last `eos_token_id` is classified.

    That state has read the whole source through cross-attention and the whole shifted input causally, so it
    summarises both, and the pads after it are never attended to. Inputs must therefore end in eos and be
    right-padded (the seq2seq tokenizer default); both are checked.
    """

    output_cls = Seq2SeqSequenceClassifierOutput

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        # BART's classification head: dropout, a tanh projection of the pooled state, dropout, the label projection.
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.out_proj = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> Seq2SeqSequenceClassifierOutput:
        if input_ids is None:
            raise ValueError("ZooEncoderDecoderForSequenceClassification finds the eos token in input_ids; pass them.")
        is_eos = torch.isin(input_ids, torch.as_tensor(self.config.eos_token_id, device=input_ids.device))
        if not is_eos.any(-1).all():
            raise ValueError(
                f"Every row needs an eos token (eos_token_id={self.config.eos_token_id}) to classify at; let the "
                "tokenizer add it (add_special_tokens=True) or append it yourself."
            )
        if attention_mask is not None and not attention_mask[:, 0].all():
            raise ValueError("Inputs are left-padded; classify right-padded inputs (tokenizer.padding_side='right').")
        outputs = self.decode_shifted_source(input_ids, attention_mask, encoder_outputs, **kwargs)
        positions = torch.arange(input_ids.shape[1], device=input_ids.device)
        last_eos = (positions * is_eos).argmax(-1)
        pooled = outputs.last_hidden_state[torch.arange(input_ids.shape[0], device=input_ids.device), last_eos]
        logits = self.out_proj(self.dropout(torch.tanh(self.dense(self.dropout(pooled)))))
        loss = None
        if labels is not None:
            loss = self.loss_function(logits=logits, labels=labels, pooled_logits=logits, config=self.config)
        return self.task_output(outputs, loss, logits=logits)


class ZooEncoderDecoderForQuestionAnswering(ZooEncoderDecoderTaskModel):
    """Extractive QA as BART and T5 do it: the source feeds the encoder and, shifted right, the decoder; start and end
    logits are read from each decoder state, which has read the whole source through cross-attention.

    Targets are `start_positions` / `end_positions` (token indices of the source); positions outside the sequence
    are ignored, and the loss averages the two cross-entropies.
    """

    output_cls = Seq2SeqQuestionAnsweringModelOutput

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        encoder_outputs: ModelOutput | tuple | None = None,
        start_positions: torch.LongTensor | None = None,
        end_positions: torch.LongTensor | None = None,
        **kwargs,
    ) -> Seq2SeqQuestionAnsweringModelOutput:
        outputs = self.decode_shifted_source(input_ids, attention_mask, encoder_outputs, **kwargs)
        start_logits, end_logits, loss = self.answer_span(outputs.last_hidden_state, start_positions, end_positions)
        return self.task_output(outputs, loss, start_logits=start_logits, end_logits=end_logits)


class ZooEncoderDecoderForTokenClassification(ZooEncoderDecoderPreTrainedModel):
    """Tags every source token (NER, POS) from the encoder's states, as transformers' `T5ForTokenClassification`:
    tagging needs no target, so the decoder is left out. Positions labelled -100 are ignored by the loss."""

    def __init__(self, config: ZooEncoderDecoderConfig):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ZooEncoderDecoderEncoderModel(config)
        self.dropout = nn.Dropout(config.hidden_dropout)
        self.classifier = nn.Linear(config.hidden_size, config.num_labels)
        self.post_init()

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.LongTensor | None = None,
        attention_mask: torch.Tensor | None = None,
        inputs_embeds: torch.FloatTensor | None = None,
        labels: torch.LongTensor | None = None,
        **kwargs,
    ) -> TokenClassifierOutput:
        outputs = self.base_model_outputs(input_ids, attention_mask, inputs_embeds, **kwargs)
        logits = self.classifier(self.dropout(outputs.last_hidden_state))
        loss = None if labels is None else self.loss_function(logits, labels, self.config)
        loss, _ = add_router_loss(self.config, loss, outputs)
        return TokenClassifierOutput(
            loss=loss, logits=logits, hidden_states=outputs.hidden_states, attentions=outputs.attentions
        )


ZooEncoderDecoderPreTrainedModel.heads_by_auto_class = {
    "AutoModel": (ZooEncoderDecoderModel,),
    "AutoModelForSeq2SeqLM": (ZooEncoderDecoderForConditionalGeneration,),
    "AutoModelForSequenceClassification": (ZooEncoderDecoderForSequenceClassification,),
    "AutoModelForQuestionAnswering": (ZooEncoderDecoderForQuestionAnswering,),
    "AutoModelForTokenClassification": (ZooEncoderDecoderForTokenClassification,),
    "AutoModelForTextEncoding": (ZooEncoderDecoderEncoderModel,),
}

__all__ = [
    "ZooEncoderDecoderPreTrainedModel",
    "ZooSeq2SeqEncoder",
    "ZooSeq2SeqDecoder",
    "ZooEncoderDecoderModel",
    "ZooEncoderDecoderEncoderModel",
    "ZooEncoderDecoderForConditionalGeneration",
    "ZooEncoderDecoderForSequenceClassification",
    "ZooEncoderDecoderForQuestionAnswering",
    "ZooEncoderDecoderForTokenClassification",
]
