"""model_cards/generate_pretraining_study.py at a tiny scale: two objectives pretrained and recorded, then each base
(and random weights) fine-tuned at every learning rate with the first seed and at its best rate with the others; a
second invocation keeps every finished run, and a third objective added later (`--without_scratch`, as a labelled base
`OBJECTIVE.LABEL`: its run with settings of its own) runs only its own;
the card's verdicts come from the runs' own numbers, and the card is made again, the same, from the records it
archived once the run folders are gone."""

from __future__ import annotations

import hashlib
import json
import shutil
import sys

import pytest
import yaml
from tests.helpers.paths import REPO

sys.path.insert(0, str(REPO / "model_cards"))
import generate_pretraining_study as study  # noqa: E402
import pretraining_study_card  # noqa: E402

import hfzoo  # noqa: E402
from hfzoo.data.corpus import load_corpus  # noqa: E402
from hfzoo.data.streaming import held_out  # noqa: E402
from hfzoo.data.tokenizer_training import train_tokenizer_on_corpus  # noqa: E402

PRETRAINING = ["--preset", "bert-tiny", "--tokenizer_kind", "wordpiece", "--vocab_size", "384", "--dataset",
               "../shared/data/enwiki/AA/wiki_00", "--max_train_samples", "20", "--max_eval_samples", "4",
               "--block_size", "32", "--per_device_batch_size", "4", "--eval_every", "2", "--save_every", "100",
               "--log_every", "1", "--tensorboard", "false"]  # fmt: skip
FINETUNING = ["--max_steps", "2", "--per_device_batch_size", "8", "--max_train_samples", "32",
              "--max_eval_samples", "16"]  # fmt: skip


def best_rate(runs, base: str) -> str:
    """The learning rate whose seed-42 run of `base` on sst2-1k scored best."""
    accuracy = {rate: json.loads((runs / f"sst2-1k-{base}-lr{rate}-seed42" / "metrics.json").read_text())["accuracy"]
                for rate in ("1e-4", "3e-3")}  # fmt: skip
    return max(accuracy, key=accuracy.get)


@pytest.mark.slow  # 2 pretraining and 9 fine-tuning processes; the recipes' own tests cover each run in make test
def test_every_base_is_fine_tuned_at_each_rate_then_at_its_best_with_every_seed_and_carded(shared_data, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.setitem(study.TASKS, "sst2-1k", (study.TASKS["sst2-1k"][0], FINETUNING, "accuracy"))
    runs = tmp_path / "runs"
    argv = ["run", str(runs), "--steps", "mlm=2", "spanbert=3", "--tasks", "sst2-1k", "--learning-rates", "1e-4",
            "3e-3", "--seeds", "42", "43", "--", *PRETRAINING]  # fmt: skip
    assert study.main(argv) == 0
    for objective, steps in (("mlm", 2), ("spanbert", 3)):
        record = json.loads((runs / f"pretrain-{objective}" / "run_record.json").read_text())
        assert f"--objective {objective} --max_steps {steps}" in record["command"]
    for base in ("mlm", "spanbert", "scratch"):
        best = best_rate(runs, base)
        other = "1e-4" if best == "3e-3" else "3e-3"
        assert (runs / f"sst2-1k-{base}-lr{best}-seed43" / "metrics.json").is_file()
        assert not (runs / f"sst2-1k-{base}-lr{other}-seed43").exists()
    command = json.loads((runs / "sst2-1k-scratch-lr1e-4-seed42" / "run_record.json").read_text())["command"]
    assert "--from_scratch true" in command and "pretrain-mlm" in command
    finished = {path: path.stat().st_mtime_ns for path in runs.glob("*/run_record.json")}
    assert study.main(argv) == 0  # nothing left to do: every finished run kept as it is
    assert {path: path.stat().st_mtime_ns for path in runs.glob("*/run_record.json")} == finished
    scratch_only = [*argv[: argv.index("--seeds")], "--seeds", "42", "44", "--bases", "scratch",
                    *argv[argv.index("--") :]]  # fmt: skip
    assert study.main(scratch_only) == 0  # one more seed for the random-weights base alone
    added_seed = sorted(path.name for path in runs.glob("*-seed44"))
    assert added_seed == [f"sst2-1k-scratch-lr{best_rate(runs, 'scratch')}-seed44"]
    finished = {path: path.stat().st_mtime_ns for path in runs.glob("*/run_record.json")}
    added = ["run", str(runs), "--steps", "electra.warmup1=2", "--tasks", "sst2-1k", "--learning-rates", "1e-4",
             "3e-3", "--seeds", "42", "--without_scratch", "--", *PRETRAINING, "--warmup_steps", "1",
             "--model.hidden_dropout", "0.0"]  # fmt: skip
    assert study.main(added) == 0  # an objective added later: its own runs only, the others kept as they are
    assert {path: path.stat().st_mtime_ns for path in finished} == finished
    assert sorted(path.parent.name for path in runs.glob("*/run_record.json") if path not in finished) == [
        "pretrain-electra.warmup1", "sst2-1k-electra.warmup1-lr1e-4-seed42", "sst2-1k-electra.warmup1-lr3e-3-seed42"]
    record = json.loads((runs / "pretrain-electra.warmup1" / "run_record.json").read_text())
    assert "--warmup_steps 1 --model.hidden_dropout 0.0 --objective electra --max_steps 2" in record["command"]

    flops = ["flops", str(runs), "--steps", "mlm=2", "--objectives", "spanbert", "--", *PRETRAINING, "--tokenizer",
             str(runs / "pretrain-mlm")]  # fmt: skip
    assert study.main(flops) == 0
    card = study.main(["card", str(runs), str(tmp_path / "card")])
    assert card == 0
    results = json.loads((tmp_path / "card" / "results.json").read_text())
    text = (tmp_path / "card" / "README.md").read_text()
    assert set(results["pretraining"]) == {"mlm", "spanbert", "electra.warmup1"}
    pretraining = text.split("## Pretraining")[1].split("\n## ")[0].splitlines()
    unlike_mlm = {row.split(" | ")[0].lstrip("| "): row.split(" | ")[10] for row in pretraining if row.startswith("| ")}
    assert unlike_mlm["spanbert"] == "-" and unlike_mlm["electra.warmup1"] == "hidden_dropout 0.0"  # the model keys
    assert (tmp_path / "card" / "validation_curves.png").is_file() and "![validation accuracy]" in text
    assert (tmp_path / "card" / "validation_accuracy.png").is_file()
    assert 0 <= results["pretraining"]["spanbert"]["final"]["eval_token_accuracy"] <= 1
    assert 0 <= results["pretraining"]["mlm"]["baseline"]["unigram_accuracy"] <= 1
    means = {}
    for base in ("mlm", "scratch"):  # at the rate with the most seeds: 2 for mlm, 3 for scratch (`--bases scratch`)
        seeds = max(results["finetuning"]["sst2-1k"][base].values(), key=len)
        means[base] = sum(100 * run["accuracy"] for run in seeds.values()) / len(seeds)
    gain = means["mlm"] - means["scratch"]
    verdict = "met" if gain >= 5 else "MISSED"
    assert (f"- sst2-1k: mlm >= scratch + 5 points: {verdict} ({means['mlm']:.2f} vs {means['scratch']:.2f}, "
            f"{gain:+.2f} points; 2 and 3 seeds") in text
    study_command = ["python", "model_cards/generate_pretraining_study.py"]
    assert results["commands"] == [[*study_command, *command] for command in (argv, scratch_only, added)]
    assert "- conll2003: spanbert >= mlm: not measured, no fine-tuning runs recorded." in text
    assert "- sst2-1k: electra.warmup1 >= mlm: met (" in text or "- sst2-1k: electra.warmup1 >= mlm: MISSED (" in text
    # ELECTRA's discriminator beside a constant guess of the replaced share, at each evaluation (a share's entropy)
    discriminator = results["pretraining"]["electra.warmup1"]["discriminator"]
    assert discriminator and all(0 < point["constant_loss"] <= 0.7 for point in discriminator)
    end = discriminator[-1]
    assert f"| electra.warmup1 |  |  |  |  | {end['loss']:.3f} / {end['constant_loss']:.3f} |" in text  # the end only
    # how alike a block's token vectors are, per layer, measured from each run's weights before they were archived
    layers = json.loads((runs / "pretrain-mlm" / "config.json").read_text())["num_hidden_layers"]
    for base in ("mlm", "spanbert", "electra.warmup1"):
        similarity = results["pretraining"][base]["token_similarity"]
        assert similarity["blocks"] > 0 and len(similarity["mean_cosine"]) == layers + 1
        assert all(-1 <= cosine <= 1 for cosine in similarity["mean_cosine"])
        assert f"| {base} | {' | '.join(f'{cosine:.3f}' for cosine in similarity['mean_cosine'])} |" in text
    counted = json.loads((runs / study.STEP_FLOPS).read_text())
    assert results["step_flops"] == counted and counted["spanbert"] > counted["mlm"]  # its span-boundary head
    assert f"| {2 * counted['mlm']:.3g} (1.00x) |" in text
    assert f"| {3 * counted['spanbert']:.3g} ({3 * counted['spanbert'] / (2 * counted['mlm']):.2f}x) |" in text
    assert "majority class accuracy" in text and "--model /" not in text and "--output_dir /" not in text
    archived = tmp_path / "card" / pretraining_study_card.ARCHIVE
    runs_made = [path.name for path in runs.iterdir() if path.is_dir()]
    assert sorted(path.name for path in archived.iterdir()) == sorted([*runs_made, "command.json", study.STEP_FLOPS])
    assert not list(archived.rglob("*.safetensors")) and not list(archived.rglob("checkpoints"))
    shutil.rmtree(runs)  # the run folders lost (another session, another machine): the card stands on its archive
    assert study.main(["card", str(runs), str(tmp_path / "card")]) == 0
    assert json.loads((tmp_path / "card" / "results.json").read_text()) == results
    assert (tmp_path / "card" / "README.md").read_text() == text


def test_bases_not_in_the_study_are_refused_before_any_run(tmp_path):
    with pytest.raises(SystemExit, match=r"--bases electra: not a base of this study \(mlm, scratch\)"):
        study.main(["run", str(tmp_path / "runs"), "--steps", "mlm=2", "--bases", "electra", "scratch"])
    assert not (tmp_path / "runs").exists()


def test_flops_counts_each_objectives_training_step_and_the_steps_of_equal_compute(shared_data, tmp_path, capsys):
    """ELECTRA's step costs the discriminator's plus its small generator's; the count is the forward and backward
    of the recipe's own model, so at least 6 FLOPs per weight of the encoder's blocks per token of the batch."""
    corpus = load_corpus("../shared/data/enwiki/AA/wiki_00", streaming=True)
    train_tokenizer_on_corpus(held_out(corpus["train"], 20), "wordpiece", 384, "encoder").save_pretrained(tmp_path)
    argv = ["flops", str(tmp_path), "--steps", "mlm=100", "--objectives", "electra", "--", *PRETRAINING,
            "--tokenizer", str(tmp_path)]  # fmt: skip
    assert study.main(argv) == 0
    counted = json.loads((tmp_path / study.STEP_FLOPS).read_text())
    assert counted["electra"] > counted["mlm"] > 0
    config = hfzoo.preset_config("bert-tiny")
    width, layers = config.hidden_size, config.num_hidden_layers
    block_weights = layers * (4 * width**2 + 2 * width * config.intermediate_size)
    assert counted["mlm"] >= 6 * block_weights * 4 * 32  # 4 blocks of 32 tokens per step
    assert f"electra={round(100 * counted['mlm'] / counted['electra'])}" in capsys.readouterr().out


def test_an_objective_counted_in_a_later_runs_folder_joins_the_archived_counts(tmp_path):
    """A runs folder added later counts its own objective beside the reference; the archive keeps every count."""
    runs, card = tmp_path / "runs", tmp_path / "card" / pretraining_study_card.ARCHIVE
    runs.mkdir()
    card.mkdir(parents=True)
    (card / study.STEP_FLOPS).write_text(json.dumps({"mlm": 1.0, "spanbert": 2.0, "electra": 3.0}))
    (runs / study.STEP_FLOPS).write_text(json.dumps({"mlm": 1.5, "mlm_nsp": 4.0}))
    assert pretraining_study_card.archive(runs, card) == []
    assert pretraining_study_card.read_step_flops(card) == {"mlm": 1.5, "spanbert": 2.0, "electra": 3.0, "mlm_nsp": 4.0}


def test_the_unigram_baseline_of_a_next_sentence_run_scores_the_pairs_the_run_scored(tmp_path):
    """BERT's `mlm_nsp` trains on pairs of segments, not packed blocks: the baseline builds the examples as the recipe
    does (it raised a KeyError for the missing B segment), and finds the run's own number of masked targets."""
    from accelerate.state import AcceleratorState, GradientState
    from generate_results import unigram_baseline

    from hfzoo.commands.pretrain import main

    try:
        run_dir = main(["--preset", "bert-tiny", "--objective", "mlm_nsp", "--tokenizer_kind", "wordpiece",
                        "--vocab_size", "384", "--max_train_samples", "40", "--max_eval_samples", "10",
                        "--block_size", "32", "--per_device_batch_size", "4", "--max_steps", "2", "--eval_every", "2",
                        "--save_every", "100", "--tensorboard", "false",
                        "--output_dir", str(tmp_path / "run")])  # fmt: skip
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)
    baseline = unigram_baseline(run_dir)
    scored = [json.loads(line) for line in (run_dir / "log.jsonl").read_text().splitlines()][-2]
    assert baseline["validation_targets"] == scored["eval_targets"] > 0
    assert baseline["unigram_perplexity"] > 1


def test_the_shared_tokenizer_is_the_one_the_recipe_trains_and_the_card_names_it_and_refuses_another(shared_data,
                                                                                                      tmp_path):
    """`tokenizer` trains what a run given no `--tokenizer` trains, byte for byte, so the command the card shows
    rebuilds the study's vocabulary; the card archives its command and SHA-256, and a run that read other files is
    refused before anything is copied (one study, one tokenizer)."""
    from accelerate.state import AcceleratorState, GradientState

    from hfzoo.commands.pretrain import main

    shared, config = tmp_path / "tokenizer", [*PRETRAINING, "--objective", "mlm", "--max_steps", "1"]
    assert study.main(["tokenizer", str(shared), "--", *config]) == 0
    record = json.loads((shared / pretraining_study_card.TOKENIZER_RECORD).read_text())
    assert record["command"] == ["python", "model_cards/generate_pretraining_study.py", "tokenizer", str(shared), "--",
                                 *config]  # fmt: skip
    with pytest.raises(SystemExit, match="exists; a study's runs share one tokenizer"):
        study.main(["tokenizer", str(shared), "--", *config])
    assert sorted(path.name for path in tmp_path.iterdir()) == ["tokenizer"]  # no staging folder left
    try:
        run_dir = main([*config, "--output_dir", str(tmp_path / "run")])  # trains its own tokenizer
    finally:
        GradientState._reset_state()
        AcceleratorState._reset_state(reset_partial_state=True)
    assert (run_dir / "tokenizer.json").read_bytes() == (shared / "tokenizer.json").read_bytes()

    def reads(tokenizer) -> None:  # the run's recorded config, naming the tokenizer folder it read
        recorded = yaml.safe_load((run_dir / "training_config.yaml").read_text())
        (run_dir / "training_config.yaml").write_text(yaml.safe_dump({**recorded, "tokenizer": str(tokenizer)}))

    archive = tmp_path / "card" / pretraining_study_card.ARCHIVE
    (archive / "pretrain-earlier").mkdir(parents=True)  # a run archived before its tokenizer's files were recorded
    (archive / "pretrain-earlier" / "run_record.json").write_text("{}")
    reads(shared)
    with pytest.raises(SystemExit, match=r"\(pretrain-earlier\) read a tokenizer whose files were not recorded"):
        pretraining_study_card.archive_tokenizer([run_dir], archive)
    shutil.rmtree(archive / "pretrain-earlier")
    pretraining_study_card.archive_tokenizer([run_dir], archive)
    kept = json.loads((archive / pretraining_study_card.TOKENIZER_RECORD).read_text())
    assert kept == {"folder": str(shared), "command": record["command"], "files": record["files"]}
    sha = hashlib.sha256((shared / "tokenizer.json").read_bytes()).hexdigest()
    assert f"`tokenizer.json` {sha}" in pretraining_study_card._tokenizer_note({"tokenizer": kept})
    corpus = load_corpus("../shared/data/enwiki/AA/wiki_00", streaming=True)
    other = train_tokenizer_on_corpus(held_out(corpus["train"], 20), "wordpiece", 300, "encoder")
    other.save_pretrained(tmp_path / "b")
    reads(tmp_path / "b")
    with pytest.raises(SystemExit, match=r"read the tokenizer in .*/b, whose files differ"):
        pretraining_study_card.archive_tokenizer([run_dir], archive)
