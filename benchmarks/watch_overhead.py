"""What `specctl watch`'s looks at `/metrics` cost the serving engine's throughput, in one run.

One reference engine (tiny-llama target, tiny-llama-eagle3 drafter, `--enable-metrics`) serves over
HTTP, as the tests start it. Each pass sends `--requests` chat-small requests from `--concurrency`
closed-loop clients (each finished request replaced by the next, greedy, up to `--max-new-tokens`)
and counts output tokens per second, under four conditions run interleaved round by round:
no scraper; a scraper thread reading `/metrics` every 1 s (watch's fastest default look, a window of
30 s or less); every 0.1 s (a stress case); and no scraper again, a control whose ratio to the first is noise alone.
The scraper reads the page as watch does (the same
client, then the Prometheus parser) and times each answer. Ratios are to the unscraped pass, per
round and as medians; the spread across rounds is what "within noise" is judged against.

    .venv/bin/python benchmarks/watch_overhead.py [--rounds 20] [--requests 24] [--concurrency 2]
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._timing import interleaved_samples  # noqa: E402
from specctl.verdict import prometheus  # noqa: E402
from specctl.verdict.client import EngineClient  # noqa: E402
from specctl.verdict.workload import load_workload  # noqa: E402
from tests.engines.reference.test_server import started  # noqa: E402

# the second unscraped pass is the control: its ratio to the first is what noise alone gives
LOOK_EVERY_S = {"no scraper": None, "/metrics every 1 s": 1.0, "/metrics every 0.1 s": 0.1, "no scraper again": None}


class Scraper:
    """A thread reading `/metrics` every `every_s` (start to start) while the block runs; keeps each
    answer's time and size."""

    def __init__(self, url: str, every_s: float, looks: list[tuple[float, int]]) -> None:
        self.client = EngineClient(url, timeout_s=10)
        self.every_s = every_s
        self.looks = looks
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.run, daemon=True)

    def run(self) -> None:
        due = time.perf_counter()
        while not self.stop.is_set():
            start = time.perf_counter()
            page = self.client.metrics(timeout_s=10)
            prometheus.parse(page)
            self.looks.append((time.perf_counter() - start, len(page.encode())))
            due += self.every_s
            self.stop.wait(max(0.0, due - time.perf_counter()))

    def __enter__(self) -> Scraper:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        self.thread.join()


def closed_loop(url: str, prompts: list[tuple[dict[str, str], ...]], concurrency: int, max_new: int) -> float:
    """Output tokens/s of `prompts` over HTTP with `concurrency` requests in flight throughout."""
    queue = list(prompts)
    lock = threading.Lock()
    tokens = 0

    def client() -> None:
        nonlocal tokens
        engine = EngineClient(url, timeout_s=120)
        while True:
            with lock:
                if not queue:
                    return
                messages = queue.pop(0)
            done = engine.chat(list(messages), max_new_tokens=max_new)
            with lock:
                tokens += done.completion_tokens

    threads = [threading.Thread(target=client) for _ in range(concurrency)]
    start = time.perf_counter()
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tokens / (time.perf_counter() - start)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=20, help="interleaved rounds of the four conditions")
    parser.add_argument("--requests", type=int, default=24, help="requests per pass (the workload, cycled)")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    args = parser.parse_args()
    workload = load_workload("chat-small").requests
    prompts = [workload[i % len(workload)] for i in range(args.requests)]
    looks: dict[str, list[tuple[float, int]]] = {name: [] for name in LOOK_EVERY_S}
    load_before = os.getloadavg()[0]
    began = time.perf_counter()
    with started() as (url, _process):

        def condition(name: str) -> Callable[[], float]:
            every_s = LOOK_EVERY_S[name]

            def one_pass() -> float:
                if every_s is None:
                    return closed_loop(url, prompts, args.concurrency, args.max_new_tokens)
                with Scraper(url, every_s, looks[name]):
                    return closed_loop(url, prompts, args.concurrency, args.max_new_tokens)

            return one_pass

        closed_loop(url, prompts, args.concurrency, args.max_new_tokens)  # warm: one unscraped pass, dropped
        rates = interleaved_samples({name: condition(name) for name in LOOK_EVERY_S}, args.rounds, warmup=0)
    elapsed = time.perf_counter() - began
    base = rates["no scraper"]
    print(
        f"reference engine over HTTP, concurrency {args.concurrency}, {args.requests} chat-small requests x up to "
        f"{args.max_new_tokens} new tokens per pass, {args.rounds} interleaved rounds, {elapsed:.0f} s in all; "
        f"1-min load average {load_before:.2f} before, {os.getloadavg()[0]:.2f} after, {os.cpu_count()} cores"
    )
    print(
        f"{'condition':<22}{'tok/s median':>13}{'min-max':>14}{'x no scraper':>13}"
        f"{'per-round ratio: median':>24}{'p10-p90':>14}"
    )
    for name, values in rates.items():
        ratios = sorted(v / b for v, b in zip(values, base, strict=True))
        low, high = ratios[int(0.1 * (len(ratios) - 1))], ratios[round(0.9 * (len(ratios) - 1))]
        print(
            f"{name:<22}{statistics.median(values):>13.1f}{min(values):>7.1f}-{max(values):<6.1f}"
            f"{statistics.median(values) / statistics.median(base):>13.3f}{statistics.median(ratios):>24.3f}"
            f"{low:>8.3f}-{high:.3f}"
        )
    print("per round (tok/s): " + "; ".join(" ".join(f"{rates[n][i]:.0f}" for n in rates) for i in range(args.rounds)))
    for name, answered in looks.items():
        if answered:
            times = sorted(t for t, _ in answered)
            p90 = times[min(len(times) - 1, int(0.9 * len(times)))]
            sizes = [size for _, size in answered]
            print(
                f"{name}: {len(answered)} looks, answer median {statistics.median(times) * 1000:.1f} ms, "
                f"p90 {p90 * 1000:.1f} ms, {min(sizes)}-{max(sizes)} bytes"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
