"""Encoder-only family: BERT-, RoBERTa- and ModernBERT-style bidirectional transformers as native HF models."""

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from transformers.activations import ACT2FN
from transformers.modeling_outputs import (
    BaseModelOutputWithPooling, MaskedLMOutput, MultipleChoiceModelOutput, QuestionAnsweringModelOutput,
    SequenceClassifierOutput, TokenClassifierOutput,
)  # fmt: skip
from transformers.utils import ModelOutput, can_return_tuple
from transformers.utils.output_capturing import capture_outputs

from .component_options import GATED_ACTIVATIONS
from .configuration_encoder import ZooEncoderConfig
from .layers import build_norm, component
from .transformer_stack import TransformerStack, ZooTransformerPreTrainedModel, add_router_loss


@dataclass
class ZooEncoderModelOutput(BaseModelOutputWithPooling):
    """`BaseModelOutputWithPooling` plus the per-layer router logits of a mixture-of-experts encoder."""

    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ZooMaskedLMOutput(MaskedLMOutput):
    """`MaskedLMOutput` plus, for mixture-of-experts encoders, the load-balancing loss (already inside `loss`).

    In training with `labels`, `logits` holds only the labelled positions: shape `[num_labelled, vocab_size]`, rows in
    the order of `labels[labels != -100]` (row-major over batch and sequence). Everywhere else it is the full
    `[batch, seq, vocab_size]`.
    """

    aux_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


@dataclass
class ZooPreTrainingOutput(ModelOutput):
    """transformers' `BertForPreTrainingOutput` plus a mixture of experts' load-balancing loss (already in `loss`).

    `prediction_logits` are the masked-LM logits, shaped as `ZooMaskedLMOutput.logits` (the labelled positions only
    in training with `labels`); `seq_relationship_logits` are `[batch, 2]`: B follows A (0) or is random (1).
    `masked_lm_loss` and `next_sentence_loss` are the two parts of `loss`, reported apart so that an evaluation can
    give the masked LM's own perplexity.
    """

    loss: torch.FloatTensor | None = None
    prediction_logits: torch.FloatTensor | None = None
    seq_relationship_logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    aux_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None
    masked_lm_loss: torch.FloatTensor | None = None
    next_sentence_loss: torch.FloatTensor | None = None


@dataclass
class ZooReplacedTokenDetectionOutput(ModelOutput):
    """transformers' `ElectraForPreTrainingOutput` plus a mixture of experts' load-balancing loss (already in `loss`).

    `logits` are `[batch, seq]`: one score per token, > 0 for "replaced", < 0 for "original".
    """

    loss: torch.FloatTensor | None = None
    logits: torch.FloatTensor | None = None
    hidden_states: tuple[torch.FloatTensor, ...] | None = None
    attentions: tuple[torch.FloatTensor, ...] | None = None
    aux_loss: torch.FloatTensor | None = None
    router_logits: tuple[torch.FloatTensor, ...] | None = None


class ZooEncoderPreTrainedModel(ZooTransformerPreTrainedModel):
    config: ZooEncoderConfig


class ZooEncoderPooler(nn.Module):
    """BERT's pooler: dense + tanh on the first ([CLS]) token, the sentence representation its heads classify.
    DeBERTa's ContextPooler and ELECTRA's classification heads are the same with GELU (`config.pooler_activation`)."""

    def __init__(self, config: ZooEncoderConfig):
        super().__init__()
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.activation = ACT2FN[config.pooler_activation]

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.activation(self.dense(hidden_states[:, 0]))


class ZooEncoderModel(TransformerStack, ZooEncoderPreTrainedModel):
    """Token (+ token-type) embeddings, positions, bidirectional blocks, a final norm for pre-norm, optional pooler.

    `add_pooling_layer` overrides `config.add_pooling_layer`: heads that never read the pooler (masked LM, token
    classification, QA) build the model without it, as BERT does, so no untrained weights sit in their checkpoints.
    """

    def __init__(self, config: ZooEncoderConfig, add_pooling_layer: bool | None = None):
        super().__init__(config)
        self.build_inputs(config, is_causal=False, embedding_size=config.embedding_size)
        if config.type_vocab_size:
            width = config.embedding_size or config.hidden_size
            self.token_type_embeddings = nn.Embedding(config.type_vocab_size, width)
        self.build_blocks(config, config.num_hidden_layers)
        if not config.first_block_attention_norm:  # ModernBERT's first block reads the embedding norm's output
            self.layers[0].self_attn_norm = nn.Identity()
        uses = config.component_files()
        self.local_attention = component("local_attention")(config, self.layers) if "local_attention" in uses else None
        self.convolution = component("deberta_convolution")(config) if "deberta_convolution" in uses else None
        add_pooling_layer = config.add_pooling_layer if add_pooling_layer is None else add_pooling_layer
        self.pooler = ZooEncoderPooler(config) if add_pooling_layer else None
        self.post_init()

    def _token_type_embeds(self, token_type_ids: torch.Tensor | None) -> torch.Tensor | None:
        """Segment embeddings; without ids every token is segment 0 (one broadcast row, no index tensor)."""
        if not self.config.type_vocab_size:
            return None  # RoBERTa/ModernBERT-style: a tokenizer's segment ids carry no signal here.
        if token_type_ids is None:
            return self.token_type_embeddings.weight[0]
        # Checked eagerly only: reading the maximum back would break a compiled graph twice (native BERT has none).
        if not torch.compiler.is_compiling() and int(token_type_ids.max()) >= self.config.type_vocab_size:
            raise ValueError(
                f"token_type_ids go up to {int(token_type_ids.max())} but type_vocab_size="
                f"{self.config.type_vocab_size}; pass segment ids below type_vocab_size or raise it in the config."
            )
        return self.token_type_embeddings(token_type_ids)

    def embed(self, input_ids: torch.Tensor, token_type_ids: torch.Tensor | None = None) -> torch.Tensor:
        """The embeddings as `forward` computes them before `embeddings_project`: token, position and token-type
        embeddings, normed and dropped out. ELECTRA's generator reads the discriminator's embeddings through this."""
        return self.embed_inputs(input_ids, None, None, extra_embeds=self._token_type_embeds(token_type_ids))[0]

    @capture_outputs
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        **kwargs,
    ) -> ZooEncoderModelOutput:
        # Every position sees every other, so an encoder is bounded by its training length whatever the position kind.
        tokens = input_ids if input_ids is not None else inputs_embeds
        if tokens is not None and tokens.shape[1] > self.config.max_position_embeddings:
            raise ValueError(
                f"Input has {tokens.shape[1]} tokens but max_position_embeddings="
                f"{self.config.max_position_embeddings}; truncate it (tokenizer truncation=True, max_length=...)."
            )
        hidden_states = self.run_stack(
            input_ids, inputs_embeds, attention_mask, position_ids, extra_embeds=self._token_type_embeds(token_type_ids),
            **kwargs,
        )  # fmt: skip
        pooled = self.pooler(hidden_states) if self.pooler is not None else None
        return ZooEncoderModelOutput(last_hidden_state=hidden_states, pooler_output=pooled)


def sentence_representation(outputs: ZooEncoderModelOutput, mask: torch.Tensor | None, pooling: str) -> torch.Tensor:
    """The pooler's output; for encoders without a pooler the first token's hidden state (RoBERTa, ModernBERT) or,
    with `pooling="mean"` (`config.classifier_pooling`), the mean over the tokens `mask` keeps (any leading shape)."""
    states = outputs.last_hidden_state
    if outputs.pooler_output is not None or pooling == "cls":
        return outputs.pooler_output if outputs.pooler_output is not None else states[:, 0]
    mask = (torch.ones(states.shape[:2]) if mask is None else mask.reshape(states.shape[:2])).to(states)
    return (states * mask.unsqueeze(-1)).sum(dim=1) / mask.sum(dim=1, keepdim=True)


class ZooEncoderTransform(nn.Module):
    """Dense + activation + norm: the masked-LM head's transform, and ModernBERT's before its task projections.

    `width` is the output's (the masked-LM head of an encoder with an `embedding_size` maps back to it, as ELECTRA's
    generator head does)."""

    def __init__(self, config: ZooEncoderConfig, width: int | None = None):
        super().__init__()
        width = width or config.hidden_size
        self.dense = nn.Linear(config.hidden_size, width, bias=config.mlp_bias)
        # A gated feed-forward activation names its gate's function (geglu -> gelu); the head is not gated.
        self.act_fn = ACT2FN[GATED_ACTIVATIONS.get(config.activation, config.activation)]
        self.norm = build_norm(config, width)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.norm(self.act_fn(self.dense(hidden_states)))


class ZooEncoderLMHead(ZooEncoderTransform):
    """BERT's masked-LM head: the transform, then the vocabulary projection (tied to the embedding)."""

    def __init__(self, config: ZooEncoderConfig):
        width = config.embedding_size or config.hidden_size
        super().__init__(config, width)
        # The per-token output bias is kept even in bias-free presets: BERT and ModernBERT both have it.
        self.decoder = nn.Linear(width, config.vocab_size)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.decoder(super().forward(hidden_states))


class ZooEncoderTaskModel(ZooEncoderPreTrainedModel):
    """What every encoder head does: encode the inputs, then map the encoding and the targets to the task's output.

    A head defines `head` (and, if its inputs need reshaping, `encode`). transformers' generic heads do not fit: they
    pool the last token, pass the encoder a cache, build it with `AutoModel.from_config` (which raises in remote code
    where hfzoo is absent) and drop a mixture of experts' load-balancing loss.
    """

    def __init__(self, config: ZooEncoderConfig, add_pooling_layer: bool | None = None):
        super().__init__(config)
        self.num_labels = config.num_labels
        self.model = ZooEncoderModel(config, add_pooling_layer=add_pooling_layer)

    @can_return_tuple
    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        **kwargs,
    ) -> ModelOutput:
        inputs = dict(
            input_ids=input_ids,
            attention_mask=attention_mask,
            token_type_ids=token_type_ids,
            position_ids=position_ids,
            inputs_embeds=inputs_embeds,
        )
        return self.head(self.encode(inputs, **kwargs), labels, inputs, **kwargs)

    def encode(self, inputs: dict, **kwargs) -> ZooEncoderModelOutput:
        return self.base_model_outputs(**inputs, **kwargs)

    def head(self, outputs: ZooEncoderModelOutput, targets, inputs: dict, **kwargs) -> ModelOutput:
        """The task's output from the encoding; `targets` are the labels, `None` at inference."""
        raise NotImplementedError

    def task_output(self, output_cls: type[ModelOutput], loss, outputs, **fields) -> ModelOutput:
        """How a head ends: the MoE load-balancing loss joins the task loss (and is reported on its own by outputs
        with an `aux_loss` field, beside the router logits); recorded states pass through."""
        loss, aux_loss = add_router_loss(self.config, loss, outputs)
        if "aux_loss" in output_cls.__dataclass_fields__:
            fields.update(aux_loss=aux_loss, router_logits=outputs.router_logits)
        return output_cls(loss=loss, hidden_states=outputs.hidden_states, attentions=outputs.attentions, **fields)


class ZooEncoderForMaskedLM(ZooEncoderTaskModel):
    """Masked-LM pretraining (BERT). The masking itself lives in the data collator; the model only takes `labels`.

    Performance: in training with `labels`, only positions with `labels != -100` (~15% under BERT's masking) go
    through the head's vocabulary projection, the largest single matmul of MLM training; see `ZooMaskedLMOutput` for
    the shape of `logits` then. In eval mode or without labels the full logits are computed.
    """

    _tied_weights_keys = {"lm_head.decoder.weight": "model.embed_tokens.weight"}
    pretrained_head = True

    def __init__(self, config: ZooEncoderConfig, add_pooling_layer: bool | None = False):
        super().__init__(config, add_pooling_layer=add_pooling_layer)
        self.lm_head = ZooEncoderLMHead(config)
        self.post_init()

    def get_output_embeddings(self) -> nn.Linear:
        return self.lm_head.decoder

    def set_output_embeddings(self, new_embeddings: nn.Linear) -> None:
        self.lm_head.decoder = new_embeddings

    def head(self, outputs: ZooEncoderModelOutput, labels, inputs: dict, **kwargs) -> ZooMaskedLMOutput:
        logits, loss = self.masked_lm(outputs.last_hidden_state, labels, **kwargs)
        return self.task_output(ZooMaskedLMOutput, loss, outputs, logits=logits)

    def masked_lm(
        self, hidden_states: torch.Tensor, labels: torch.Tensor | None, **kwargs
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The vocabulary logits (of the labelled positions only, in training) and, with `labels`, their loss."""
        if labels is not None and self.training:
            labelled = labels != -100
            hidden_states, labels = hidden_states[labelled], labels[labelled]
        logits = self.lm_head(hidden_states)
        return logits, None if labels is None else self.loss_function(logits, labels, self.config.vocab_size, **kwargs)


class ZooEncoderForPreTraining(ZooEncoderForMaskedLM):
    """BERT's pretraining: masked LM plus next-sentence prediction (is segment B the one that follows A?).

    The NSP classifier reads the sentence representation: the pooler when the config has one (BERT), which NSP
    thereby pretrains for the classification heads, else the first token. The loss is the sum of the masked-LM
    loss over `labels` and the cross-entropy of `next_sentence_label` (0: B follows A, 1: B is random), as in
    transformers' `BertForPreTraining`; either may be left out. The collator that builds the pairs is
    `MaskedLMCollator(next_sentence_prediction=True)`.
    """

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config, add_pooling_layer=None)
        # transformers names losses by class-name suffix and has none for "ForPreTraining": the masked-LM part
        # must not fall back to its default causal (shifted) loss.
        self.loss_type = "ForMaskedLM"
        self.seq_relationship = nn.Linear(config.hidden_size, 2)
        self.post_init()  # again, now that the NSP classifier exists

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
        next_sentence_label: torch.Tensor | None = None,
        **kwargs,
    ) -> ZooPreTrainingOutput:
        # Named here so that Trainer finds both label names; both travel on as the head's targets.
        targets = (labels, next_sentence_label)
        return super().forward(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, targets, **kwargs)

    def head(self, outputs: ZooEncoderModelOutput, targets, inputs: dict, **kwargs) -> ZooPreTrainingOutput:
        labels, next_sentence_label = targets
        prediction_logits, masked_lm_loss = self.masked_lm(outputs.last_hidden_state, labels, **kwargs)
        seq_relationship_logits = self.seq_relationship(sentence_representation(outputs, None, "cls"))
        loss, nsp_loss = masked_lm_loss, None
        if next_sentence_label is not None:
            nsp_loss = F.cross_entropy(
                seq_relationship_logits, next_sentence_label.view(-1).to(seq_relationship_logits.device)
            )
            loss = nsp_loss if loss is None else loss + nsp_loss
        return self.task_output(
            ZooPreTrainingOutput,
            loss,
            outputs,
            prediction_logits=prediction_logits,
            seq_relationship_logits=seq_relationship_logits,
            masked_lm_loss=masked_lm_loss,
            next_sentence_loss=nsp_loss,
        )


class ZooEncoderForReplacedTokenDetection(ZooEncoderTaskModel):
    """ELECTRA's discriminator (Clark et al., 2020; transformers' `ElectraForPreTraining`): for every token, was it
    replaced by the generator's sample (1) or is it the original (0)?

    The head is dense + activation, then one score per token. The loss is the binary cross-entropy of the scores
    against `labels` (1 replaced, 0 original, -100 ignored: padding), averaged over the labelled tokens. The generator
    and the combined loss are a training-time module (`hfzoo.objectives.electra`); this model is what pretraining keeps,
    and its encoder loads into every task head for fine-tuning.
    """

    pretrained_head = True

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config, add_pooling_layer=False)
        self.dense = nn.Linear(config.hidden_size, config.hidden_size)
        self.act_fn = ACT2FN[GATED_ACTIVATIONS.get(config.activation, config.activation)]
        self.dense_prediction = nn.Linear(config.hidden_size, 1)
        self.post_init()

    def head(self, outputs: ZooEncoderModelOutput, labels, inputs: dict, **kwargs) -> ZooReplacedTokenDetectionOutput:
        logits = self.dense_prediction(self.act_fn(self.dense(outputs.last_hidden_state))).squeeze(-1)
        loss = None
        if labels is not None:
            labelled = labels.to(logits.device) != -100
            loss = F.binary_cross_entropy_with_logits(logits[labelled], labels.to(logits.device)[labelled].float())
        return self.task_output(ZooReplacedTokenDetectionOutput, loss, outputs, logits=logits)


class ZooEncoderClassifier(ZooEncoderTaskModel):
    """BERT's classification heads: dropout, then one linear layer (`classifier`) with `num_outputs` outputs."""

    def __init__(self, config: ZooEncoderConfig, num_outputs: int, add_pooling_layer: bool | None = None):
        super().__init__(config, add_pooling_layer=add_pooling_layer)
        # ModernBERT's heads transform what they project (`classifier_transform`); BERT's project it as it is.
        self.transform = ZooEncoderTransform(config) if config.classifier_transform else nn.Identity()
        dropout = config.hidden_dropout if config.classifier_dropout is None else config.classifier_dropout
        self.dropout = nn.Dropout(dropout)
        self.classifier = nn.Linear(config.hidden_size, num_outputs)
        self.post_init()

    def pooled(self, outputs: ZooEncoderModelOutput, inputs: dict) -> torch.Tensor:
        """What a sequence classifier classifies: the sentence representation, through the head's `transform`."""
        pooling = self.config.classifier_pooling
        return self.transform(sentence_representation(outputs, inputs["attention_mask"], pooling))


class ZooEncoderForSequenceClassification(ZooEncoderClassifier):
    """Classifies the sentence representation (pooled [CLS]); regression, single- or multi-label by `problem_type`."""

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config, config.num_labels)

    def head(self, outputs: ZooEncoderModelOutput, labels, inputs: dict, **kwargs) -> SequenceClassifierOutput:
        logits = self.classifier(self.dropout(self.pooled(outputs, inputs)))
        loss = None if labels is None else self.loss_function(labels=labels, pooled_logits=logits, config=self.config)
        return self.task_output(SequenceClassifierOutput, loss, outputs, logits=logits)


class ZooEncoderForTokenClassification(ZooEncoderClassifier):
    """Tags every token (NER, POS); positions labelled -100 are ignored by the loss."""

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config, config.num_labels, add_pooling_layer=False)

    def head(self, outputs: ZooEncoderModelOutput, labels, inputs: dict, **kwargs) -> TokenClassifierOutput:
        logits = self.classifier(self.dropout(self.transform(outputs.last_hidden_state)))
        loss = None if labels is None else self.loss_function(logits, labels, self.config)
        return self.task_output(TokenClassifierOutput, loss, outputs, logits=logits)


class ZooEncoderForMultipleChoice(ZooEncoderClassifier):
    """Scores each of `num_choices` (prompt, choice) encodings, inputs shaped `[batch, num_choices, seq]` (SWAG).

    Each choice is encoded as its own sequence: the inputs are flattened to `[batch * num_choices, seq]` before
    encoding. One linear layer scores each sentence representation and a softmax over the choices gives the
    cross-entropy loss against `labels` (the index of the right choice).
    """

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config, 1)

    def encode(self, inputs: dict, **kwargs) -> ZooEncoderModelOutput:
        flat = {name: None if tensor is None else tensor.flatten(0, 1) for name, tensor in inputs.items()}
        return super().encode(flat, **kwargs)

    def head(self, outputs: ZooEncoderModelOutput, labels, inputs: dict, **kwargs) -> MultipleChoiceModelOutput:
        num_choices = (inputs["input_ids"] if inputs["input_ids"] is not None else inputs["inputs_embeds"]).shape[1]
        logits = self.classifier(self.dropout(self.pooled(outputs, inputs))).view(-1, num_choices)
        # transformers has no shared multiple-choice loss; BERT uses plain cross-entropy over the choices.
        loss = None if labels is None else F.cross_entropy(logits, labels.to(logits.device))
        return self.task_output(MultipleChoiceModelOutput, loss, outputs, logits=logits)


class ZooEncoderForQuestionAnswering(ZooEncoderTaskModel):
    """Extractive QA (SQuAD): start and end logits per token; the loss averages the two cross-entropies.

    Targets are `start_positions` / `end_positions` (token indices), the names transformers' QA data preparation and
    `Trainer` use; positions outside the sequence are ignored, as in BERT.
    """

    def __init__(self, config: ZooEncoderConfig):
        super().__init__(config, add_pooling_layer=False)
        # ModernBERT's heads transform what they project (`classifier_transform`); BERT's project it as it is.
        self.transform = ZooEncoderTransform(config) if config.classifier_transform else nn.Identity()
        self.qa_outputs = nn.Linear(config.hidden_size, 2)
        self.post_init()

    def forward(
        self,
        input_ids: torch.Tensor | None = None,
        attention_mask: torch.Tensor | None = None,
        token_type_ids: torch.Tensor | None = None,
        position_ids: torch.Tensor | None = None,
        inputs_embeds: torch.Tensor | None = None,
        start_positions: torch.Tensor | None = None,
        end_positions: torch.Tensor | None = None,
        **kwargs,
    ) -> QuestionAnsweringModelOutput:
        # Named here so that Trainer and the QA pipeline see them; both travel on as the head's targets.
        targets = (start_positions, end_positions)
        return super().forward(input_ids, attention_mask, token_type_ids, position_ids, inputs_embeds, targets, **kwargs)

    def head(self, outputs: ZooEncoderModelOutput, targets, inputs: dict, **kwargs) -> QuestionAnsweringModelOutput:
        start_logits, end_logits, loss = self.answer_span(self.transform(outputs.last_hidden_state), *targets)
        return self.task_output(
            QuestionAnsweringModelOutput, loss, outputs, start_logits=start_logits, end_logits=end_logits
        )


# AutoModelForPreTraining gives each pretraining output the head it was trained with (`architectures` picks it):
# BERT's MLM + NSP by default, the masked-LM head, or ELECTRA's discriminator.
ZooEncoderPreTrainedModel.heads_by_auto_class = {
    "AutoModel": (ZooEncoderModel,),
    "AutoModelForMaskedLM": (ZooEncoderForMaskedLM,),
    "AutoModelForPreTraining": (
        ZooEncoderForPreTraining,
        ZooEncoderForMaskedLM,
        ZooEncoderForReplacedTokenDetection,
    ),
    "AutoModelForSequenceClassification": (ZooEncoderForSequenceClassification,),
    "AutoModelForTokenClassification": (ZooEncoderForTokenClassification,),
    "AutoModelForQuestionAnswering": (ZooEncoderForQuestionAnswering,),
    "AutoModelForMultipleChoice": (ZooEncoderForMultipleChoice,),
}

__all__ = [
    "ZooEncoderPreTrainedModel",
    "ZooEncoderModel",
    "ZooEncoderForMaskedLM",
    "ZooEncoderForPreTraining",
    "ZooEncoderForReplacedTokenDetection",
    "ZooEncoderForSequenceClassification",
    "ZooEncoderForTokenClassification",
    "ZooEncoderForQuestionAnswering",
    "ZooEncoderForMultipleChoice",
]
