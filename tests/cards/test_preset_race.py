"""model_cards/generate_preset_race.py at a tiny scale: one tokenizer for every config, each config's steps from its own
calibration, the runs made at the same time on a core each with one thread, and a card that states the time each
config took to reach the first one's final loss and regenerates from its archived records."""

from __future__ import annotations

import json
import re
import shutil
import sys

import pytest
from tests.helpers.paths import REPO

from hfzoo.training.logging import steps_filling

sys.path.insert(0, str(REPO / "model_cards"))
import generate_preset_race as race  # noqa: E402

CONFIGS = ["recipes/configs/gpt-small-enwiki-clm.yaml", "recipes/configs/gpt-speedrun-small-enwiki-clm.yaml"]
TINY = ("--preset gpt-tiny --dataset ../shared/data/enwiki/AA/wiki_00 --vocab_size 384 --max_train_samples 20 "
        "--max_eval_samples 4 --block_size 32 --per_device_batch_size 4 --eval_batches 2 --log_every 1 "
        "--tensorboard false")  # fmt: skip


@pytest.mark.slow  # 5 recipe processes, two at a time: about 75 s
def test_configs_race_on_a_core_each_and_the_card_says_when_each_reached_the_first(shared_data, tmp_path):
    runs, card = tmp_path / "runs", tmp_path / "card"
    assert race.main(["run", str(runs), *CONFIGS, "--minutes", "0.05", "--recipe_args", TINY]) == 0
    for config in CONFIGS:
        name = config.rsplit("/", 1)[1].removesuffix(".yaml")
        end = next(r for r in map(json.loads, (runs / name / "log.jsonl").read_text().splitlines())
                   if r["event"] == "end")  # fmt: skip
        assert end["step"] == steps_filling(0.05, runs / f"{name}-calibration")
        record = json.loads((runs / name / "run_record.json").read_text())
        assert (record["machine"]["cores"], record["machine"]["torch_threads"]) == (1, 1)
        assert re.search(r"--tokenizer \S+/runs/tokenizer( |$)", record["command"]), record["command"]  # one for all
    assert race.main(["card", str(runs), str(card)]) == 0
    text = (card / "README.md").read_text()
    assert "| gpt-small-enwiki-clm |" in text and "(the reference)" in text
    assert "- gpt-speedrun-small-enwiki-clm reaches gpt-small-enwiki-clm's final validation loss" in text
    shutil.rmtree(runs)
    assert race.main(["card", str(runs), str(card)]) == 0
    assert (card / "README.md").read_text() == text


def test_the_time_to_a_loss_is_read_between_the_evaluations_around_it():
    curve = [{"train_s": 10.0, "validation_loss": 3.0}, {"train_s": 20.0, "validation_loss": 2.0},
             {"train_s": 30.0, "validation_loss": 1.5}]  # fmt: skip
    assert race.seconds_to_reach(curve, 2.5) == 15.0 and race.seconds_to_reach(curve, 3.5) == 10.0
    assert race.seconds_to_reach(curve, 1.5) == 30.0 and race.seconds_to_reach(curve, 1.0) is None
