"""How many requests verify needs to decide an accept-length gate, sequential (stop once the
anytime-valid interval clears the gate) against a fixed-count design with the same error rate, on
simulated EAGLE-3 requests (tests/verdict/simulate.py), in one run.

The fixed design is the usual one: the smallest count whose 95 % interval decides a true margin
with 90 % power, n = ((z_0.975 + z_0.9) * sd / margin)^2, using the simulated per-request spread.

    .venv/bin/python benchmarks/sequential_requests.py [--reps 400]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.verdict import stats  # noqa: E402
from tests.verdict.simulate import requests, true_accept_length  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=400)
    parser.add_argument("--max-requests", type=int, default=512)
    args = parser.parse_args()
    truth = true_accept_length()
    rng = np.random.default_rng(2026)
    tokens, verify = requests(rng, 100_000)
    _, sd, _ = stats._ratio_parts(tokens, verify)  # per-request spread of the linearised ratio
    print(f"true accept length {truth:.3f}; per-request sd {sd:.3f}; {args.reps} repetitions per margin")
    print(f"{'margin':>7} {'fixed n':>8} {'sequential median':>18} {'mean':>6} {'p90':>5} {'decided':>8} {'wrong':>6} {'median/fixed':>13}")
    for margin in (0.1, 0.2, 0.3, 0.5, 0.8):
        gate = truth - margin
        fixed = stats.fixed_sample_size(sd, margin)
        needed, wrong, decided = [], 0, 0
        for _ in range(args.reps):
            tok, ver = requests(rng, args.max_requests)
            n_used = args.max_requests
            for n in range(stats.MIN_SAMPLES, args.max_requests + 1):
                iv = stats.ratio_sequence(tok[:n], ver[:n], planned_n=fixed)
                if iv is not None and (iv.low > gate or iv.high < gate):
                    decided += 1
                    wrong += iv.high < gate
                    n_used = n
                    break
            needed.append(n_used)
        arr = np.array(needed)
        print(f"{margin:7.2f} {fixed:8d} {np.median(arr):18.0f} {arr.mean():6.1f} {np.percentile(arr, 90):5.0f} "
              f"{decided / args.reps:8.1%} {wrong / args.reps:6.1%} {np.median(arr) / fixed:13.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
