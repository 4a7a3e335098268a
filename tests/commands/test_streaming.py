"""Streamed pretraining (`--streaming true`): packed on the fly, split across processes, resumed exactly.

The recipe test is the one users depend on: two real processes (`python -m torch.distributed.run`, gloo) stream the
default corpus, the whole job is killed with SIGKILL at a random step and resumed, and the weights and every step's
loss equal an uninterrupted run's. It crosses each process's epoch boundary (its share of 10 texts packs into ~5
batches), with dropout and gradient accumulation on (recipes/configs/test-gpt-tiny-clm.yaml).
"""

from __future__ import annotations

import itertools
import json
import random
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import datasets
import psutil
import pytest
from tests.helpers.paths import PRETRAIN_RECIPE as RECIPE, PRETRAIN_TEST_CONFIG as CONFIG
from tests.helpers.recipe_runs import recipe_env, run_pretrain as run_in_process
from tests.helpers.run_outputs import max_weight_difference, train_losses

from hfzoo.data.corpus import load_corpus
from hfzoo.data.packing import pack, pack_in_windows
from hfzoo.data.streaming import StreamedBatches, held_out, training_stream
from hfzoo.training import list_checkpoints
from hfzoo.training.logging import read_log

STREAMED = ["--streaming", "true", "--max_steps", "12", "--eval_every", "6", "--save_every", "4"]
TWO_PROCESSES = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2"]


def _texts(n: int) -> datasets.IterableDataset:
    texts = [f"text {i} " + "word " * (i % 7) for i in range(n)]
    return datasets.Dataset.from_dict({"text": texts}).to_iterable_dataset()


def _launch(out: Path, *extra: str, log=subprocess.DEVNULL) -> subprocess.Popen:
    """The recipe on two processes (python -m torch.distributed.run, gloo)."""
    command = [*TWO_PROCESSES, str(RECIPE), "--config", str(CONFIG), "--output_dir", str(out), *STREAMED, *extra]
    return subprocess.Popen(command, env=recipe_env(threads=1), stdout=log, stderr=subprocess.STDOUT)


def _kill_job(launcher: subprocess.Popen) -> None:
    """SIGKILL the launcher and its training processes at once. torchrun starts each of them in a session of its own,
    so killing the launcher (or its process group) alone would leave them training."""
    job = [psutil.Process(launcher.pid), *psutil.Process(launcher.pid).children(recursive=True)]
    assert len(job) >= 3, "the launcher and two training processes"
    for process in job:
        process.send_signal(signal.SIGKILL)
    launcher.wait()
    _, alive = psutil.wait_procs(job, timeout=30)
    assert not alive, alive


def _logged_step(out: Path) -> int:
    """The last training step in the (growing) log; a half-written last line is skipped."""
    step = 0
    if (out / "log.jsonl").is_file():
        for line in (out / "log.jsonl").read_text().splitlines():
            try:
                record = json.loads(line)
            except json.JSONDecodeError:
                continue
            step = record["step"] if record.get("event") == "train" else step
    return step


def test_a_stream_resumes_from_its_state_exactly_across_epochs(tokenizer):
    def stream() -> StreamedBatches:
        return StreamedBatches(pack_in_windows(_texts(12), tokenizer, 8, window=5), batch_size=3)

    uninterrupted = list(itertools.islice(stream(), 20))  # ~5 batches per epoch: several epochs
    first = stream()
    iterator = iter(first)
    head = [next(iterator) for _ in range(7)]
    saved = json.loads(json.dumps(first.state_dict()))  # as a checkpoint keeps it
    resumed = stream()
    resumed.load_state_dict(saved)
    assert saved["epoch"] >= 1
    assert head + list(itertools.islice(resumed, 13)) == uninterrupted


def test_packing_in_windows_packs_each_window_as_pack_does(tokenizer):
    texts = _texts(12)
    windows = [datasets.Dataset.from_dict({"text": [e["text"] for e in itertools.islice(texts, i, i + 5)]})
               for i in range(0, 12, 5)]  # fmt: skip
    expected = [block for window in windows for block in pack(window, tokenizer, 8)["input_ids"]]
    assert [block["input_ids"] for block in pack_in_windows(texts, tokenizer, 8, window=5)] == expected


def test_processes_stream_every_other_block_of_a_one_shard_corpus(tokenizer):
    """One shard (file) does not divide between two processes: each keeps every other block of the packed stream."""
    whole, first, second = ([b["input_ids"] for b in training_stream(_texts(40), tokenizer, 4, 1, rank, size).blocks]
                            for rank, size in ((0, 1), (0, 2), (1, 2)))  # fmt: skip
    assert first == whole[0::2] and second == whole[1::2] and len(whole) > 20


def test_processes_stream_whole_files_when_their_number_divides(tmp_path, tokenizer):
    for part in range(4):
        (tmp_path / f"part{part}.txt").write_text("".join(f"file {part} line {i}\n" for i in range(30)))
    texts = load_corpus(str(tmp_path), streaming=True, validation_fraction=0.0)["train"]
    for rank in range(2):
        share = training_stream(texts, tokenizer, 4, 1, rank, 2).blocks
        text = tokenizer.decode([t for b in share for t in b["input_ids"]])
        assert {int(n) for n in re.findall(r"file (\d)", text)} == {rank, rank + 2}


def test_a_share_shorter_than_one_batch_is_refused_naming_the_process(tokenizer):
    with pytest.raises(ValueError, match="process 1's share of the training stream packs into fewer than 64 blocks"):
        next(iter(training_stream(_texts(4), tokenizer, 8, 64, 1, 2)))


def test_the_held_out_set_is_the_first_validation_texts():
    validation = load_corpus(streaming=True, seed=11)["validation"]
    expected = load_corpus(seed=11)["validation"]["text"][:25]
    assert held_out(validation, 25)["text"] == expected


def test_streaming_refuses_an_objective_that_does_not_pack(tmp_path):
    with pytest.raises(SystemExit, match="streaming': objective 'mlm_nsp' builds its examples per document"):
        run_in_process("--output_dir", str(tmp_path / "nsp"), "--preset", "bert-tiny", "--objective", "mlm_nsp",
                       "--streaming", "true")  # fmt: skip
    assert not (tmp_path / "nsp").exists()


def test_a_streamed_run_evaluates_on_the_held_out_blocks_of_a_loaded_run(tmp_path):
    """The fixed held-out set is the validation split's first max_eval_samples texts, streamed or not; the trained
    tokenizer is the same too (trained on the first max_train_samples texts)."""
    runs = {name: run_in_process("--output_dir", str(tmp_path / name), "--max_steps", "2", "--streaming", streaming)
            for name, streaming in (("streamed", "true"), ("loaded", "false"))}  # fmt: skip
    streamed, loaded = read_log(runs["streamed"])[0], read_log(runs["loaded"])[0]
    assert streamed["train_blocks"] is None and loaded["train_blocks"] > 0
    assert streamed["eval_blocks"] == loaded["eval_blocks"] > 0
    assert (runs["streamed"] / "tokenizer.json").read_text() == (runs["loaded"] / "tokenizer.json").read_text()


@pytest.mark.slow  # three two-process launches, 70 s in CI; a stream's exact resume is above
def test_two_streaming_processes_killed_at_a_random_step_resume_to_the_uninterrupted_weights(tmp_path):
    reference = tmp_path / "reference"
    with open(tmp_path / "reference.log", "w") as log:
        assert _launch(reference, log=log).wait(timeout=600) == 0, (tmp_path / "reference.log").read_text()[-3000:]
    kill_after = random.randint(5, 11)  # past the first checkpoint (step 4), before the end (12)
    out = tmp_path / "killed"
    with open(tmp_path / "killed.log", "w") as log:
        process = _launch(out, log=log)
        deadline = time.monotonic() + 600
        while _logged_step(out) < kill_after and process.poll() is None and time.monotonic() < deadline:
            time.sleep(0.01)
        assert process.poll() is None, "the run finished before it was killed"
        _kill_job(process)
        killed_at = _logged_step(out)
    assert not (out / "model.safetensors").exists(), "the run finished before it was killed"
    checkpoint = list_checkpoints(out)[-1]
    assert {"stream_0.json", "stream_1.json"} <= {p.name for p in checkpoint.iterdir()}

    with open(tmp_path / "resumed.log", "w") as log:
        assert _launch(out, "--resume", log=log).wait(timeout=600) == 0, (tmp_path / "resumed.log").read_text()[-3000:]
    start = [r for r in read_log(out) if r["event"] == "start"][-1]
    print(f"killed after step {killed_at}; resumed from step {start['step']}")
    assert start["num_processes"] == 2 and start["resumed_from"] is not None
    assert max_weight_difference(out, reference) <= 1e-6
    assert train_losses(out) == train_losses(reference)
