"""`hfzoo quickstart`: the end-to-end tour on the embedded default corpus, on one CPU, with no network.

Builds the corpus (the installed Python standard library's docstrings), trains a tokenizer, pretrains the
`gpt-tiny` preset as a causal LM, compares it with a unigram baseline, saves it, reloads it through the
Auto classes (and through `trust_remote_code` in a process where hfzoo cannot be imported) and generates.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from tqdm.auto import tqdm
from transformers import AutoModelForCausalLM, AutoTokenizer, get_cosine_schedule_with_warmup

from .data.default_corpus import load_default_corpus
from .data.packing import pack
from .data.tokenizer_training import train_tokenizer_on_corpus
from .presets import preset_config

BLOCK_SIZE = 128
BATCH_SIZE = 16


def unigram_perplexity(train_ids: torch.Tensor, validation_ids: torch.Tensor, vocab_size: int) -> float:
    """Perplexity of add-one-smoothed unigram frequencies: the floor any language model must beat."""
    counts = torch.bincount(train_ids.flatten(), minlength=vocab_size).double() + 1.0
    log_probs = (counts / counts.sum()).log()
    return math.exp(-log_probs[validation_ids.flatten()].mean().item())


@torch.no_grad()
def validation_loss(model, blocks: torch.Tensor) -> float:
    model.eval()
    losses = [model(input_ids=batch, labels=batch).loss.item() for batch in blocks.split(BATCH_SIZE)]
    model.train()
    return sum(losses) / len(losses)


REMOTE_CODE_CHECK = """
import sys, torch
try:
    import hfzoo
    sys.exit("hfzoo should not be importable here")
except ImportError:
    pass
from transformers import AutoModelForCausalLM
model = AutoModelForCausalLM.from_pretrained(sys.argv[1], trust_remote_code=True).eval()
ids = torch.load(sys.argv[2])
print(float((model(ids).logits - torch.load(sys.argv[3])).abs().max()))
"""


def check_remote_code(model_dir: Path, model) -> float:
    """Reload `model_dir` in a child process where `import hfzoo` fails; return the max logit difference."""
    with tempfile.TemporaryDirectory() as scratch:
        blocker = Path(scratch, "blocker", "hfzoo")
        blocker.mkdir(parents=True)
        (blocker / "__init__.py").write_text("raise ImportError('hfzoo is blocked in this process')\n")
        ids = torch.arange(1, 17)[None]
        with torch.no_grad():
            torch.save(ids, Path(scratch, "ids.pt"))
            torch.save(model.eval()(ids).logits, Path(scratch, "logits.pt"))
        env = {**os.environ, "PYTHONPATH": str(blocker.parent), "HF_MODULES_CACHE": str(Path(scratch, "modules"))}
        result = subprocess.run(
            [sys.executable, "-c", REMOTE_CODE_CHECK, str(model_dir.resolve()), "ids.pt", "logits.pt"],
            cwd=scratch, env=env, capture_output=True, text=True, check=False,
        )
        if result.returncode != 0:
            raise RuntimeError(f"trust_remote_code reload failed:\n{result.stderr[-2000:]}")
        return float(result.stdout.strip().splitlines()[-1])


def run_quickstart(output_dir: str | os.PathLike = "runs/quickstart", steps: int = 200, seed: int = 0) -> dict:
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    started = time.perf_counter()

    print("1/5 building the default corpus (standard-library docstrings)")
    corpus = load_default_corpus()
    print(f"    {len(corpus['train'])} train / {len(corpus['validation'])} validation docstrings")

    print("2/5 training a byte-level BPE tokenizer")
    tokenizer = train_tokenizer_on_corpus(corpus["train"], kind="bpe", vocab_size=4096, family="decoder")
    blocks = pack(corpus, tokenizer, BLOCK_SIZE)
    train_blocks = torch.tensor(blocks["train"]["input_ids"])
    validation_blocks = torch.tensor(blocks["validation"]["input_ids"])

    print(f"3/5 pretraining gpt-tiny for {steps} steps (causal LM, {BATCH_SIZE}x{BLOCK_SIZE} tokens a step)")
    config = preset_config(
        "gpt-tiny",
        vocab_size=len(tokenizer),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = AutoModelForCausalLM.from_config(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.01)
    scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=max(1, steps // 10), num_training_steps=steps)
    generator = torch.Generator().manual_seed(seed)
    model.train()
    progress = tqdm(range(steps), desc="gpt-tiny", unit="step")
    for _ in progress:
        batch = train_blocks[torch.randint(len(train_blocks), (BATCH_SIZE,), generator=generator)]
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad(set_to_none=True)
        progress.set_postfix(loss=f"{loss.item():.3f}")

    print("4/5 evaluating against a unigram baseline, saving, reloading")
    perplexity = math.exp(validation_loss(model, validation_blocks))
    baseline = unigram_perplexity(train_blocks, validation_blocks, len(tokenizer))
    model_dir = output_dir / "gpt-tiny-clm"
    model.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    reloaded = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    reloaded_tokenizer = AutoTokenizer.from_pretrained(model_dir)
    remote_diff = check_remote_code(model_dir, reloaded)

    print("5/5 generating from the reloaded model")
    prompt = "Return the"
    inputs = reloaded_tokenizer(prompt, return_tensors="pt")
    generated = reloaded.generate(**inputs, max_new_tokens=24, do_sample=False, pad_token_id=tokenizer.pad_token_id)
    text = reloaded_tokenizer.decode(generated[0], skip_special_tokens=True)

    summary = {
        "artefact": str(model_dir),
        "preset": "gpt-tiny",
        "objective": "causal LM",
        "parameters": sum(p.numel() for p in model.parameters()),
        "steps": steps,
        "validation_perplexity": perplexity,
        "unigram_baseline_perplexity": baseline,
        "remote_code_max_logit_diff": remote_diff,
        "sample": text,
        "seconds": time.perf_counter() - started,
    }
    (output_dir / "summary.json").write_text(json.dumps(summary, indent=2))
    print()
    print(f"  model            {model_dir}  ({summary['parameters'] / 1e6:.2f}M parameters)")
    print(f"  validation ppl   {perplexity:.1f}   (unigram baseline {baseline:.1f})")
    print(f"  remote code      reloaded without hfzoo, max |logit diff| = {remote_diff:.1e}")
    print(f"  sample           {text!r}")
    print(f"  time             {summary['seconds']:.0f} s; summary in {output_dir / 'summary.json'}")
    return summary
