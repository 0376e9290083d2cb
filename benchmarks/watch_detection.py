"""How fast `watch` says `degraded` after acceptance drops, and how often it says so falsely over a
long healthy run, on simulated EAGLE-3 traffic (tests/verdict/simulate.py), in one run.

Each window is what `watch` sees with sglang 0.5.13+'s counters: one look every `--look-every`,
and per look the requests finished since the last one (Poisson, `--rate` requests per second),
their tokens and verify steps summed; the window's looks are judged by verdict/drift.py as the
k-th look at the release (alpha spending), against a verified lower bound and `watch.tolerance`.

    .venv/bin/python benchmarks/watch_detection.py [--reps 200] [--healthy-windows 2000]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.verdict.drift import Expectation, judge  # noqa: E402
from specctl.verdict.window import Window  # noqa: E402
from tests.verdict.simulate import requests, true_accept_length  # noqa: E402


def window(rng: np.random.Generator, mean_accept: float, looks: int, per_look: float) -> Window:
    """One window: `looks` looks, each adding the requests that finished since the one before."""
    pairs, finished = [], 0
    for _ in range(looks):
        n = int(rng.poisson(per_look))
        if n:
            tokens, verify = requests(rng, n, mean_accept=mean_accept)
            pairs.append((float(tokens.sum()), float(verify.sum())))
            finished += n
    return Window(0.0, 1.0, "counters", tuple(pairs), finished)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--reps", type=int, default=200, help="drops simulated per size")
    parser.add_argument("--healthy-windows", type=int, default=2000, help="windows of a healthy release")
    parser.add_argument("--window-s", type=float, default=300.0)
    parser.add_argument("--look-every-s", type=float, default=10.0)
    parser.add_argument("--rate", type=float, default=0.5, help="requests finished per second")
    parser.add_argument("--tolerance", type=float, default=0.3)
    parser.add_argument("--max-windows", type=int, default=20, help="windows watched after the drop")
    args = parser.parse_args()
    rng = np.random.default_rng(2026)
    looks = int(args.window_s / args.look_every_s)
    per_look = args.rate * args.look_every_s
    healthy_p = 0.6
    healthy = true_accept_length(mean_accept=healthy_p)
    # the verified lower bound: what a verify of 32 requests would have measured, at its low end
    verified_low = healthy - 0.15
    expect = Expectation(gate=None, verified_low=verified_low, tolerance=args.tolerance)
    print(
        f"healthy accept length {healthy:.3f}; floor {expect.floor:.3f}; windows of {args.window_s:.0f} s, "
        f"a look every {args.look_every_s:.0f} s, {args.rate} requests/s ({looks * per_look:.0f} per window)"
    )
    print(
        f"{'accept length':>14} {'drop':>6} {'vs floor':>9} {'degraded':>9} {'windows median':>15} {'p90':>5} "
        f"{'requests median':>16}"
    )
    for p in (0.55, 0.5, 0.45, 0.4, 0.3, 0.2):
        truth = true_accept_length(mean_accept=p)
        needed = []
        for _ in range(args.reps):
            for k in range(1, args.max_windows + 1):
                if judge(window(rng, p, looks, per_look), expect, k).state == "degraded":
                    needed.append(k)
                    break
        delay = (
            f"{np.median(needed):15.0f} {np.percentile(needed, 90):5.0f} {np.median(needed) * looks * per_look:16.0f}"
            if needed
            else f"{'-':>15} {'-':>5} {'-':>16}"
        )
        shown = f"{truth - (expect.floor or 0):+9.2f}"
        print(f"{truth:14.3f} {healthy - truth:6.2f} {shown} {len(needed) / args.reps:9.1%} {delay}")
    alarms = sum(
        judge(window(rng, healthy_p, looks, per_look), expect, k).state == "degraded"
        for k in range(1, args.healthy_windows + 1)
    )
    hours = args.healthy_windows * args.window_s / 3600
    print(f"false alarms over {args.healthy_windows} healthy windows ({hours:.0f} h of traffic): {alarms}")
    at_floor = Expectation(gate=None, verified_low=healthy + args.tolerance, tolerance=args.tolerance)
    edge = sum(
        judge(window(rng, healthy_p, looks, per_look), at_floor, k).state == "degraded"
        for k in range(1, args.healthy_windows + 1)
    )
    print(f"false alarms with the true accept length exactly at the floor: {edge} of {args.healthy_windows}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
