"""Throughput of `hfzoo serve` under concurrent clients: all requests on one adapter, spread over N adapters, and one
request at a time, all measured against the same server process in one run (issue 38's targets).

A `gpt-<size>` preset (random init, fp32) with a byte-level BPE tokenizer trained on the embedded default corpus, and
N random LoRA adapters (r=8 on PEFT's default targets, non-zero B), are saved into a temporary folder; `hfzoo serve`
starts on them in its own process (`--threads` torch threads) and this process plays the clients with httpx. Each
scenario sends `--requests` completions (a validation docstring's first `--prompt-words` words, greedy,
`--max-tokens` new tokens) in rounds that rotate the scenarios' order:

- `one_adapter`: `--clients` concurrent clients, every request naming adapter 0;
- `spread`: the same clients, request i naming adapter i mod N (the fixed-routing path, one forward for all);
- `one_at_a_time`: one client, one request after another (no batching can happen).

The figures are requests/s and generated tokens/s (the completions' own token counts: a random model may stop
early at its end-of-text token), medians over the rounds; the ratios are medians of per-round ratios. Targets:
spread >= 0.8x one_adapter (near-flat in the number of adapters, S-LoRA's claim), one_adapter >= 3x one_at_a_time.

    .venv/bin/python benchmarks/bench_serve.py                 # gpt-small, 8 adapters, 16 clients
    .venv/bin/python benchmarks/bench_serve.py --tiny          # seconds: the harness as the tests run it
"""

import argparse
import asyncio
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import torch
from peft import LoraConfig, get_peft_model
from transformers import AutoModelForCausalLM

import hfzoo
from hfzoo.data.default_corpus import load_default_corpus
from hfzoo.data.tokenizer_training import train_tokenizer

sys.path.insert(0, str(Path(__file__).resolve().parent))
from common import REPO_ROOT, environment, print_table, write_json  # noqa: E402  (benchmarks is not a package)

SCENARIOS = ("one_adapter", "spread", "one_at_a_time")
TARGETS = {"spread_vs_one_adapter": 0.8, "batched_vs_one_at_a_time": 3.0}


def build_folders(root: Path, preset: str, adapters: int, vocab_size: int) -> tuple[Path, list[Path]]:
    """The base model (with its tokenizer) and `adapters` LoRA folders under `root`."""
    texts = load_default_corpus("train")["text"]
    tokenizer = train_tokenizer(texts, "bpe", vocab_size, "decoder", num_sentinels=0)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(hfzoo.preset_config(preset, vocab_size=len(tokenizer)))
    model.save_pretrained(root / "base")
    tokenizer.save_pretrained(root / "base")
    folders = []
    for index in range(adapters):
        torch.manual_seed(index + 1)
        peft_model = get_peft_model(model, LoraConfig(r=8, lora_alpha=16, init_lora_weights=False))
        peft_model.save_pretrained(root / f"adapter{index}")
        model = peft_model.unload()
        folders.append(root / f"adapter{index}")
    return root / "base", folders


def start_server(base: Path, adapters: list[Path], args: argparse.Namespace) -> tuple[subprocess.Popen, str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    command = [sys.executable, "-m", "hfzoo.cli", "serve", str(base), "--port", str(port),
               "--max_batch_size", str(args.clients), "--max_wait_ms", str(args.max_wait_ms),
               *[arg for index, path in enumerate(adapters) for arg in ("--adapter", f"a{index}={path}")]]  # fmt: skip
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads), "PYTHONPATH": str(REPO_ROOT)}
    server = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 300
    while True:
        if server.poll() is not None:
            raise RuntimeError(f"hfzoo serve exited:\n{server.stdout.read()}")
        try:
            if httpx.get(f"{url}/health").status_code == 200:
                return server, url
        except httpx.TransportError:
            if time.monotonic() > deadline:
                raise RuntimeError("hfzoo serve did not answer /health within 300 s") from None
            time.sleep(0.5)


async def run_scenario(url: str, scenario: str, prompts: list[str], args: argparse.Namespace) -> dict:
    """Send every prompt once, from one client or `--clients` at once; seconds, requests/s and tokens/s."""
    models = [("a0" if scenario == "one_adapter" else f"a{index % args.adapters}") for index in range(len(prompts))]
    queue = list(zip(prompts, models))
    clients = 1 if scenario == "one_at_a_time" else args.clients
    generated = 0

    async def client(http: httpx.AsyncClient) -> None:
        nonlocal generated
        while queue:
            prompt, model = queue.pop()
            body = {"model": model, "prompt": prompt, "max_tokens": args.max_tokens, "temperature": 0}
            response = await http.post(f"{url}/v1/completions", json=body)
            response.raise_for_status()
            generated += response.json()["usage"]["completion_tokens"]

    started = time.perf_counter()
    async with httpx.AsyncClient(timeout=600, limits=httpx.Limits(max_connections=clients)) as http:
        await asyncio.gather(*(client(http) for _ in range(clients)))
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "requests_per_s": len(prompts) / seconds, "tokens_per_s": generated / seconds}


def median_ratio(rounds: list[dict], candidate: str, reference: str) -> dict:
    ratios = [r[candidate]["tokens_per_s"] / r[reference]["tokens_per_s"] for r in rounds]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios)}


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--preset", default="gpt-small")
    parser.add_argument("--adapters", type=int, default=8)
    parser.add_argument("--clients", type=int, default=16)
    parser.add_argument("--requests", type=int, default=32, help="completions per scenario and round")
    parser.add_argument("--prompt-words", type=int, default=24, help="words of each prompt (a docstring's first)")
    parser.add_argument("--max-tokens", type=int, default=32)
    parser.add_argument("--max-wait-ms", type=float, default=10.0)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2, help="torch threads of the server")
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--tiny", action="store_true", help="gpt-tiny, 2 adapters, 4 clients, 1 round: seconds")
    parser.add_argument("--output", type=Path, default=REPO_ROOT / "benchmarks" / "results" / "serve.json")
    args = parser.parse_args(argv)
    if args.tiny:
        args.preset, args.adapters, args.clients, args.requests, args.rounds = "gpt-tiny", 2, 4, 8, 1
        args.prompt_words, args.max_tokens, args.vocab_size = 8, 4, 500
    started = environment()
    with tempfile.TemporaryDirectory() as folder:
        base, adapters = build_folders(Path(folder), args.preset, args.adapters, args.vocab_size)
        server, url = start_server(base, adapters, args)
        try:
            texts = load_default_corpus("validation")["text"]
            prompts = [" ".join(texts[i % len(texts)].split()[: args.prompt_words]) for i in range(args.requests)]
            asyncio.run(run_scenario(url, "spread", prompts[: args.clients], args))  # warm-up: every adapter once
            rounds = []
            for round_index in range(args.rounds):
                order = SCENARIOS[round_index % 3 :] + SCENARIOS[: round_index % 3]
                rounds.append({name: asyncio.run(run_scenario(url, name, prompts, args)) for name in order})
        finally:
            server.terminate()
            server.wait(timeout=30)
    results = {
        name: {key: statistics.median(r[name][key] for r in rounds) for key in ("requests_per_s", "tokens_per_s")}
        for name in SCENARIOS
    }
    ratios = {"spread_vs_one_adapter": median_ratio(rounds, "spread", "one_adapter"),
              "batched_vs_one_at_a_time": median_ratio(rounds, "one_adapter", "one_at_a_time")}  # fmt: skip
    started["load_average_end"] = os.getloadavg()
    settings = {key: value for key, value in vars(args).items() if key != "output"}
    payload = {"benchmark": "serve", "command": "python benchmarks/bench_serve.py" + (" --tiny" if args.tiny else ""),
               "environment": started, "settings": settings, "scenarios": results, "rounds": rounds,
               "ratios": {name: {**ratio, "target": TARGETS[name], "met": ratio["median"] >= TARGETS[name]}
                          for name, ratio in ratios.items()}}  # fmt: skip
    print_table(["scenario", "requests/s", "tokens/s"],
                [[name, f"{row['requests_per_s']:.2f}", f"{row['tokens_per_s']:.1f}"] for name, row in results.items()])
    for name, ratio in payload["ratios"].items():
        print(f"{name}: {ratio['median']:.2f}x ({ratio['min']:.2f}-{ratio['max']:.2f}), target >= {ratio['target']}")
    write_json(args.output, payload)
    print(f"wrote {args.output}")
    return payload


if __name__ == "__main__":
    main()
