"""BERT's next-sentence prediction through the pretrain recipe: documents cut into consecutive segment pairs, the
`mlm_nsp` objective (ForPreTraining head, pair-building collator), and the refusal of NSP under plain `mlm`."""

import datasets
import pytest
import torch
from accelerate.state import AcceleratorState, GradientState
from transformers import AutoModelForSequenceClassification, AutoTokenizer

from hfzoo.data.sentence_pairs import segment_length, sentence_pairs, split_document
from hfzoo.models import ZooEncoderForPreTraining
from hfzoo.recipes.pretrain import PretrainConfig, main
from hfzoo.training.logging import read_log
from hfzoo.training.objectives import get_objective


def test_a_document_is_cut_into_consecutive_pairs_that_fit_the_block():
    document = list(range(23))
    pairs = split_document(document, max_length=5)
    assert len(pairs) == 3  # 23 tokens need 6 segments of at most 5
    assert [token for a, b in pairs for token in a + b] == document  # in order, every token once
    assert all(0 < len(segment) <= 5 for pair in pairs for segment in pair)
    assert split_document([7, 8], max_length=5) == [([7], [8])]
    assert split_document([7], max_length=5) == []  # one token cannot be split
    assert segment_length(32) == 14  # [CLS] 14 [SEP] 14 [SEP] = 31 <= 32
    with pytest.raises(ValueError, match="block_size=4 leaves no room"):
        segment_length(4)


def test_sentence_pairs_keep_each_pair_inside_its_document(tokenizer):
    texts = datasets.Dataset.from_dict({"text": ["alpha beta gamma delta " * 6, "x", "one two three four five six"]})
    pairs = sentence_pairs(texts, tokenizer, block_size=16)
    assert set(pairs["document_id"]) <= {0, 2}  # the one-token text is left out
    for example in pairs:
        assert len(example["input_ids"]) + len(example["next_input_ids"]) + 3 <= 16
        original = tokenizer(texts[example["document_id"]]["text"], add_special_tokens=False)["input_ids"]
        joined = example["input_ids"] + example["next_input_ids"]
        assert any(original[i : i + len(joined)] == joined for i in range(len(original)))  # B follows A


def test_nsp_under_the_plain_mlm_objective_is_refused_naming_mlm_nsp():
    config = PretrainConfig(preset="bert-tiny", objective="mlm", collator={"next_sentence_prediction": True})
    with pytest.raises(ValueError, match=r"objective 'mlm' trains with next_sentence_prediction=False; .* 'mlm_nsp'"):
        config.check()
    objective = get_objective("mlm_nsp", "bert-tiny")
    with pytest.raises(ValueError, match=r"for next_sentence_prediction=False use objective 'mlm'"):
        objective.check_collator_options({"next_sentence_prediction": False})


def test_the_recipe_trains_mlm_nsp_and_saves_an_encoder_the_classifier_loads(tmp_path):
    args = [
        "--preset", "bert-tiny", "--objective", "mlm_nsp", "--tokenizer_kind", "wordpiece", "--vocab_size", "384",
        "--max_train_samples", "40", "--max_eval_samples", "10", "--block_size", "32", "--per_device_batch_size", "4",
        "--max_steps", "4", "--eval_every", "4", "--save_every", "100", "--log_every", "1", "--tensorboard", "false",
        "--output_dir", str(tmp_path / "bert"),
    ]  # fmt: skip
    try:
        output_dir = main(args)
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)
    records = read_log(output_dir)
    assert [r["step"] for r in records if r["event"] == "train"] == [1, 2, 3, 4]
    assert [r["event"] for r in records][-2:] == ["eval", "end"]
    pretrained = ZooEncoderForPreTraining.from_pretrained(output_dir)
    classifier = AutoModelForSequenceClassification.from_pretrained(output_dir, num_labels=2)
    assert torch.equal(classifier.model.pooler.dense.weight, pretrained.model.pooler.dense.weight)
    tokenizer = AutoTokenizer.from_pretrained(output_dir)
    pair = tokenizer("first segment", "second segment", return_tensors="pt")
    with torch.no_grad():
        assert classifier(**pair).logits.shape == (1, 2)
