"""One composition called from many threads at once (issue 17 item 5): each call's routing inputs (adapter names,
padding masks) are its own, so every thread gets exactly what a single-threaded call with the same inputs gives.

Adapters are PEFT LoRA adapters with random (non-zero) factors on a tiny llama, so each adapter visibly changes the
logits and a call routed by another thread's names would differ.
"""

import threading

import pytest
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

from hfzoo.adapters import compose

THREADS = 50
NAMES = ("a", "b", "c")


@pytest.fixture(scope="module")
def folders(tmp_path_factory, tiny_model, tokenizer_overrides):
    root = tmp_path_factory.mktemp("threads")
    tiny_model("llama-tiny", **tokenizer_overrides).save_pretrained(root / "base")
    folders = {}
    for seed, name in enumerate(NAMES):
        torch.manual_seed(seed)
        config = LoraConfig(r=4, target_modules=["qkv_proj", "o_proj"], init_lora_weights=False, task_type="CAUSAL_LM")
        get_peft_model(AutoModelForCausalLM.from_pretrained(root / "base"), config).save_pretrained(root / name)
        folders[name] = root / name
    return root, folders


def _run_threads(call, inputs: list) -> list:
    """`call(input)` for every input, each in its own thread, all started together."""
    results, errors = [None] * len(inputs), []
    start = threading.Barrier(len(inputs))

    def work(i: int) -> None:
        start.wait()
        try:
            results[i] = call(inputs[i])
        except Exception as error:  # collected: a thread's exception would otherwise only be printed
            errors.append(error)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(len(inputs))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not errors, errors[:3]
    return results


@pytest.mark.parametrize("strategy", ["fixed", "soft"])
def test_concurrent_calls_equal_single_threaded_ones(folders, strategy):
    root, adapters = folders
    base = AutoModelForCausalLM.from_pretrained(root / "base").eval()
    options = {"granularity": "sequence"} if strategy == "soft" else {}
    composed = compose(base, adapters, strategy, **options)
    generator = torch.Generator().manual_seed(0)
    inputs = []
    for i in range(THREADS):
        batch, length = 1 + i % 3, 4 + i % 5  # shapes differ too: a mask of another call would not even fit
        ids = torch.randint(3, 200, (batch, length), generator=generator)
        mask = torch.ones_like(ids)
        mask[0, : i % 3] = 0  # left padding, different per call (sequence routing reads the mask)
        names = [(NAMES + ("__base__",))[(i + row) % 4] for row in range(batch)] if strategy == "fixed" else None
        inputs.append((ids, mask, names))

    def call(item):
        ids, mask, names = item
        extra = {} if names is None else {"adapter_names": names}
        with torch.no_grad():
            return composed(input_ids=ids, attention_mask=mask, **extra).logits

    reference = [call(item) for item in inputs]
    assert not torch.equal(reference[0], reference[1][:1, : reference[0].shape[1]])  # the routing matters
    for attempt in range(3):  # a race shows in some runs only; three rounds of 50 calls
        outputs = _run_threads(call, inputs)
        wrong = [i for i, (out, ref) in enumerate(zip(outputs, reference)) if not torch.equal(out, ref)]
        assert not wrong, f"round {attempt}: calls {wrong} differ from their single-threaded result"
