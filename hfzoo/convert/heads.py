"""The heads each hfzoo family shares with its native families, built once per topology.

A native family names its classes and says where its bare model sits (`transformer.`, `model.`, `bert.`, ...) and
where the weights that differ between families live; the list of heads both sides have is the same for GPT-2 and
Llama, for BERT and RoBERTa, for T5 and BART.
"""

from ..models import (
    ZooDecoderForCausalLM,
    ZooDecoderForQuestionAnswering,
    ZooDecoderForSequenceClassification,
    ZooDecoderForTokenClassification,
    ZooDecoderModel,
    ZooEncoderDecoderEncoderModel,
    ZooEncoderDecoderForConditionalGeneration,
    ZooEncoderDecoderForQuestionAnswering,
    ZooEncoderDecoderForSequenceClassification,
    ZooEncoderDecoderForTokenClassification,
    ZooEncoderDecoderModel,
    ZooEncoderForMaskedLM,
    ZooEncoderForMultipleChoice,
    ZooEncoderForQuestionAnswering,
    ZooEncoderForSequenceClassification,
    ZooEncoderForTokenClassification,
    ZooEncoderModel,
)
from .family import Head
from .mapping import Rule, linear


def decoder_heads(
    names: tuple[str, ...], prefix: str, token_classifier: str, question_answering_prefix: str | None
) -> tuple[Head, ...]:
    """Bare model, causal LM, sequence classification (on the last non-pad token, no bias), token classification
    and extractive QA; `names` are the native classes in that order, `token_classifier` the native tagger's name,
    `question_answering_prefix` where the native QA head keeps its bare model (`transformer.` for GPT-2 and Llama;
    `None` for a family without a QA class, whose `names` then stop at the tagger)."""
    bare, causal_lm, sequence, token, *question_answering = names
    heads = (
        Head(ZooDecoderModel, bare, "", ""),
        Head(ZooDecoderForCausalLM, causal_lm, "model.", prefix, lambda zoo, native: linear("lm_head", "lm_head", False)),
        Head(ZooDecoderForSequenceClassification, sequence, "model.", prefix, lambda zoo, native: linear("score", "score", False)),
        Head(ZooDecoderForTokenClassification, token, "model.", prefix, lambda zoo, native: linear("score", token_classifier, True)),
    )
    if question_answering_prefix is None:
        return heads
    return (*heads, Head(ZooDecoderForQuestionAnswering, question_answering[0], "model.", question_answering_prefix,
                         lambda zoo, native: linear("qa_outputs", "qa_outputs", True)))


def encoder_heads(name: str, prefix: str, masked_lm: list[Rule], sequence_classifier: list[Rule]) -> tuple[Head, ...]:
    """`<name>Model`, `<name>ForMaskedLM`, `...ForSequenceClassification`, `...ForTokenClassification`,
    `...ForQuestionAnswering` and `...ForMultipleChoice`, with the masked-LM and sequence-classifier rules that
    differ between BERT and RoBERTa."""
    classifier = linear("classifier", "classifier", True)
    return (
        Head(ZooEncoderModel, f"{name}Model", "", ""),
        Head(ZooEncoderForMaskedLM, f"{name}ForMaskedLM", "model.", prefix, lambda zoo, native: masked_lm),
        Head(ZooEncoderForSequenceClassification, f"{name}ForSequenceClassification", "model.", prefix,
             lambda zoo, native: sequence_classifier),
        Head(ZooEncoderForTokenClassification, f"{name}ForTokenClassification", "model.", prefix, lambda zoo, native: classifier),
        Head(ZooEncoderForQuestionAnswering, f"{name}ForQuestionAnswering", "model.", prefix,
             lambda zoo, native: linear("qa_outputs", "qa_outputs", True)),
        Head(ZooEncoderForMultipleChoice, f"{name}ForMultipleChoice", "model.", prefix, lambda zoo, native: classifier),
    )


def seq2seq_heads(
    name: str, generation_prefix: str, classifier_prefix: str, generation_rules, tagger_prefix: str | None = None
) -> tuple[Head, ...]:
    """`<name>Model`, `<name>ForConditionalGeneration` (its head's rules from `generation_rules(zoo, native)`),
    `<name>ForSequenceClassification`, whose dense + tanh + projection head is hfzoo's `dense` and `out_proj`, and
    `<name>ForQuestionAnswering` (its bare model where the generation head keeps it). A family with an encoder-only
    tagger (T5's `<name>ForTokenClassification`, which keeps `<name>EncoderModel` at `tagger_prefix`) adds both."""
    classifier = [*linear("dense", "classification_head.dense", True), *linear("out_proj", "classification_head.out_proj", True)]
    heads = (
        Head(ZooEncoderDecoderModel, f"{name}Model", "", ""),
        Head(ZooEncoderDecoderForConditionalGeneration, f"{name}ForConditionalGeneration", "model.", generation_prefix,
             generation_rules),
        Head(ZooEncoderDecoderForSequenceClassification, f"{name}ForSequenceClassification", "model.", classifier_prefix,
             lambda zoo, native: classifier),
        Head(ZooEncoderDecoderForQuestionAnswering, f"{name}ForQuestionAnswering", "model.", generation_prefix,
             lambda zoo, native: linear("qa_outputs", "qa_outputs", True)),
    )
    if tagger_prefix is None:
        return heads
    return (
        *heads,
        Head(ZooEncoderDecoderForTokenClassification, f"{name}ForTokenClassification", "model.", tagger_prefix,
             lambda zoo, native: linear("classifier", "classifier", True), encoder_only=True),
        Head(ZooEncoderDecoderEncoderModel, f"{name}EncoderModel", "", "", encoder_only=True),
    )
