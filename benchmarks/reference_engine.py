"""Throughput of the reference engine with and without speculation at concurrency 1, 4 and 16, in one run.

Closed-loop clients on the batching scheduler (no HTTP): `c` requests are in flight at all times,
each finished one replaced by the next prompt of the chat-small workload, greedy, float64. Three
engines: plain greedy (the baseline), EAGLE-3 with the trained drafter (the demo's v1) and with the
same drafter reading the wrong layers (v2, ids [-1, 1, 3] -> positions 0, 2, 4). Speedup is against
the baseline at the same concurrency; the cases run interleaved and each cell is the median of
`--repeat` passes. On the CPU by default; `--device cuda` runs the same code on a GPU.
`--roofline floor_ms=8,knee_tokens=32,token_ms=0.5` gives every target forward a GPU's shape of
time (flat while memory-bound, per token past the knee; `engines/reference/roofline.py`), and adds
a fourth case, v1 drafting 10 steps, whose 11-token verify turns compute-bound as the batch grows.

    python benchmarks/reference_engine.py [--device cpu|cuda] [--max-new-tokens 64] [--repeat 3] [--requests 64]
                                          [--roofline SPEC]
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

import torch  # noqa: E402

from specctl.engines.reference import tokenizer  # noqa: E402
from specctl.engines.reference.roofline import Roofline  # noqa: E402
from specctl.engines.reference.scheduler import Progress, Scheduler  # noqa: E402
from specctl.engines.reference.speculate import SpeculativeDecoder  # noqa: E402

MODELS = ROOT / "specctl" / "engines" / "reference" / "models"
WORKLOAD = ROOT / "specctl" / "verdict" / "workloads" / "chat-small.jsonl"
CONCURRENCY = (1, 4, 16)
WRONG_POSITIONS = (0, 2, 4)  # what sglang 0.5.23 captures for the demo's v2 ids [-1, 1, 3] on a Llama target


def closed_loop(scheduler: Scheduler, prompts: list[list[int]], concurrency: int, max_new: int) -> tuple[float, float]:
    """(output tokens/s, accept length) of `prompts` with `concurrency` requests in flight throughout."""
    queue = list(prompts)
    tokens = verify = 0

    def submit_next() -> None:
        if queue:
            scheduler.submit(queue.pop(0), max_new, on_progress)

    def on_progress(progress: Progress) -> None:
        nonlocal tokens, verify
        if progress.done is not None:
            tokens += progress.done.completion_tokens
            verify += progress.done.spec_verify_ct
            submit_next()

    start = time.perf_counter()
    for _ in range(concurrency):
        submit_next()
    with torch.inference_mode():
        while scheduler.step():
            pass
    return tokens / (time.perf_counter() - start), tokens / verify if verify else float("nan")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--requests", type=int, default=64, help="requests per pass (the workload, cycled)")
    parser.add_argument("--roofline", type=Roofline.parse, help="floor_ms=..,knee_tokens=..,token_ms=.. (default: none)")
    args = parser.parse_args()
    workload = [tokenizer.encode(tokenizer.apply_chat_template(json.loads(line)["messages"]))
                for line in WORKLOAD.read_text().splitlines() if line.strip()]
    prompts = [workload[i % len(workload)] for i in range(args.requests)]
    target, drafter = MODELS / "tiny-llama", MODELS / "tiny-llama-eagle3"
    top = max(CONCURRENCY)
    common = {"device": args.device, "max_running_requests": top, "roofline": args.roofline}
    engines = {
        "baseline": SpeculativeDecoder(target, **common),
        "v1 eagle3 trained layers": SpeculativeDecoder(target, drafter, **common),
        "v2 eagle3 wrong layers": SpeculativeDecoder(target, drafter, capture_positions=WRONG_POSITIONS, **common),
    }
    if args.roofline is not None:
        engines["v1, 10 steps"] = SpeculativeDecoder(target, drafter, num_steps=10, **common)
    schedulers = {name: Scheduler(engine) for name, engine in engines.items()}
    for engine in engines.values():
        engine.warmup()
    rates: dict[tuple[str, int], list[float]] = {(name, c): [] for name in engines for c in CONCURRENCY}
    accept: dict[str, float] = {}
    for _ in range(args.repeat):
        for c in CONCURRENCY:
            for name, scheduler in schedulers.items():  # interleaved, so drift hits every case alike
                rate, accept[name] = closed_loop(scheduler, prompts, c, args.max_new_tokens)
                rates[name, c].append(rate)
    median = {key: statistics.median(values) for key, values in rates.items()}
    forwards = {name: engine.forwards for name, engine in engines.items()}
    print(f"device {args.device}{', roofline ' + str(args.roofline) if args.roofline else ''}, {args.requests} requests x up to {args.max_new_tokens} new tokens per pass, "
          f"median of {args.repeat} interleaved passes; tok/s (x vs concurrency 1) and speedup vs baseline")
    print(f"{'engine':<26}{'accept':>7}" + "".join(f"{'c=' + str(c) + ' tok/s':>22}{'speedup':>9}" for c in CONCURRENCY))
    for name in engines:
        cells = []
        for c in CONCURRENCY:
            rate = median[name, c]
            cells.append(f"{rate:>12.0f} (x{rate / median[name, 1]:5.2f}){rate / median['baseline', c]:>9.2f}")
        print(f"{name:<26}{accept[name]:>7.2f}" + "".join(cells))
    print("forwards over the run: " + ", ".join(f"{n}: target {f.target}, drafter {f.drafter}" for n, f in forwards.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
