"""Tokens/s of the reference engine with and without speculation (EAGLE-3, 3 steps, topk 1), in one run.

Greedy decoding of the chat-small workload, batch 1, float64. On the CPU by default; `--device
cuda` runs the same code on a GPU (the README reports both, the GPU through the device tool).

    python benchmarks/reference_engine.py [--device cpu|cuda] [--max-new-tokens 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.engines.reference import tokenizer  # noqa: E402
from specctl.engines.reference.speculate import ReferenceEngine  # noqa: E402

MODELS = ROOT / "specctl" / "engines" / "reference" / "models"
WORKLOAD = ROOT / "specctl" / "verdict" / "workloads" / "chat-small.jsonl"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    prompts = [tokenizer.encode(tokenizer.apply_chat_template(json.loads(line)["messages"]))
               for line in WORKLOAD.read_text().splitlines() if line.strip()]
    engines = {
        "baseline": ReferenceEngine(MODELS / "tiny-llama", device=args.device),
        "eagle3 (trained layers)": ReferenceEngine(MODELS / "tiny-llama", MODELS / "tiny-llama-eagle3", device=args.device),
        "eagle3 (wrong layers [-1, 1, 3])": ReferenceEngine(MODELS / "tiny-llama", MODELS / "tiny-llama-eagle3", device=args.device,
                                                            capture_positions=(0, 2, 4)),
    }
    for engine in engines.values():
        engine.warmup()
    rates: dict[str, list[float]] = {name: [] for name in engines}
    accept: dict[str, float] = {}
    for _ in range(args.repeat):
        for name, engine in engines.items():  # interleaved, so drift hits every case alike
            tokens = verify = 0
            start = time.perf_counter()
            for prompt in prompts:
                g = engine.generate(prompt, args.max_new_tokens)
                tokens += g.completion_tokens
                verify += g.spec_verify_ct
            rates[name].append(tokens / (time.perf_counter() - start))
            accept[name] = tokens / verify if verify else float("nan")
    base = statistics.median(rates["baseline"])
    print(f"device {args.device}, {len(prompts)} prompts x {args.max_new_tokens} new tokens, median of {args.repeat}")
    for name, values in rates.items():
        rate = statistics.median(values)
        print(f"{name:<34} {rate:8.1f} tok/s  x{rate / base:4.2f}  accept length {accept[name]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
