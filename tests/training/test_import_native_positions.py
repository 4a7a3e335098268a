"""`--import_native true` counts a RoBERTa's usable positions as the native model does (issue 37 item 8).

RoBERTa numbers positions from pad_token_id + 1, so a table of 34 rows holds 32 tokens. Without the import that is
refused above 32; imported, the hfzoo config keeps all 34 rows (the pad offset's rows moved to the end, for an exact
round trip) and `--max_length` 33 and 34 were accepted: the last positions read rows no token ever trained.
"""

import pytest
from transformers import RobertaConfig, RobertaForMaskedLM

from hfzoo.cli import main

TABLE = 34


@pytest.mark.parametrize("over", [1, 2], ids=["limit+1", "table-size"])
def test_import_native_refuses_max_length_past_roberta_usable_positions(tmp_path, tokenizer, capsys, over):
    config = RobertaConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                           intermediate_size=64, max_position_embeddings=TABLE,
                           pad_token_id=tokenizer.pad_token_id)  # fmt: skip
    RobertaForMaskedLM(config).save_pretrained(tmp_path / "roberta")
    tokenizer.save_pretrained(tmp_path / "roberta")
    rows = "text,label\n" + "".join(f"some words {i},{'ab'[i % 2]}\n" for i in range(8))
    (tmp_path / "train.csv").write_text(rows)
    limit = TABLE - tokenizer.pad_token_id - 1
    capsys.readouterr()
    with pytest.raises(SystemExit) as exit_info:
        main(["finetune", "--task", "sequence-classification", "--model", str(tmp_path / "roberta"),
              "--import_native", "true", "--train_file", str(tmp_path / "train.csv"), "--validation_file",
              str(tmp_path / "train.csv"), "--max_steps", "1", "--max_length", str(limit + over),
              "--output_dir", str(tmp_path / "out")])  # fmt: skip
    line = capsys.readouterr().err.strip().splitlines()[-1]
    assert exit_info.value.code == 2
    assert f"'max_length' is {limit + over}" in line and f"max_length <= {limit}" in line and "pad_token_id" in line
