"""Timing helpers for the benchmarks: interleaved repetitions in one run, medians, ratios."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Callable, Sequence


def wall(argv: Sequence[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(argv, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    return time.perf_counter() - start


def interleaved_samples(cases: dict[str, Callable[[], float]], repeat: int, warmup: int = 2) -> dict[str, list[float]]:
    """Every round's figure of each case, the cases run round-robin so drift hits all of them alike."""
    for _ in range(warmup):
        for fn in cases.values():
            fn()
    samples: dict[str, list[float]] = {name: [] for name in cases}
    for _ in range(repeat):
        for name, fn in cases.items():
            samples[name].append(fn())
    return samples


def interleaved(cases: dict[str, Callable[[], float]], repeat: int, warmup: int = 2) -> dict[str, float]:
    """Median seconds of each case, the cases run round-robin so drift hits all of them alike."""
    samples = interleaved_samples(cases, repeat, warmup)
    return {name: statistics.median(values) for name, values in samples.items()}
