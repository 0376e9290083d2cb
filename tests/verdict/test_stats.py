"""The verdict's statistics on simulated accept-length data: the 95 % interval covers the truth
93-97 % of the time, the sequential interval keeps its error rate although verify looks after every
request, and looking after every request at the fixed interval would not."""

from __future__ import annotations

import math

import numpy as np
import pytest

from specctl.verdict import stats
from tests.verdict.simulate import requests, true_accept_length

REPS = 1000
TRUTH = true_accept_length()


def _sequential_decision(tokens: np.ndarray, verify: np.ndarray, gate: float, interval) -> tuple[str | None, int]:  # type: ignore[no-untyped-def]
    """Look after every request from MIN_SAMPLES on: 'pass'/'fail' at the first decided look, else None."""
    for n in range(stats.MIN_SAMPLES, len(tokens) + 1):
        iv = interval(tokens[:n], verify[:n])
        if iv.low > gate:
            return "pass", n
        if iv.high < gate:
            return "fail", n
    return None, len(tokens)


def test_t_quantile_matches_tables() -> None:
    for df, expected in [(7, 2.364624), (9, 2.262157), (20, 2.085963), (60, 2.000298), (5000, 1.959964)]:
        assert stats.t_quantile(0.975, df) == pytest.approx(expected, abs=5e-4)


def test_fixed_interval_covers_95_percent() -> None:
    rng = np.random.default_rng(7)
    covered = 0
    for _ in range(REPS):
        tokens, verify = requests(rng, 32)
        iv = stats.ratio_interval(tokens, verify)
        assert iv is not None and iv.kind == "fixed"
        covered += iv.low <= TRUTH <= iv.high
    assert 0.93 <= covered / REPS <= 0.97, covered / REPS


def test_sequential_interval_covers_at_every_look() -> None:
    rng = np.random.default_rng(8)
    always = 0
    for _ in range(REPS):
        tokens, verify = requests(rng, 48)
        always += all(iv.low <= TRUTH <= iv.high for n in range(stats.MIN_SAMPLES, 49)
                      if (iv := stats.ratio_sequence(tokens[:n], verify[:n], planned_n=48)) is not None)
    assert always / REPS >= 0.95, always / REPS


def test_early_stop_error_rate_at_the_gate() -> None:
    """True accept length exactly at the gate: any early decision is an error; at most 5 %."""
    rng = np.random.default_rng(9)
    errors = sum(_sequential_decision(*requests(rng, 48), TRUTH,
                                      lambda t, v: stats.ratio_sequence(t, v, planned_n=48))[0] is not None for _ in range(REPS))
    assert errors / REPS <= 0.05, errors / REPS


def test_peeking_at_the_fixed_interval_would_inflate_the_error() -> None:
    """The reason for the sequential interval: the same looks at the fixed one err far above 5 %."""
    rng = np.random.default_rng(9)
    errors = sum(_sequential_decision(*requests(rng, 48), TRUTH, stats.ratio_interval)[0] is not None for _ in range(REPS))
    assert errors / REPS > 0.10, errors / REPS


def test_a_clear_margin_is_decided_early_and_rightly() -> None:
    rng = np.random.default_rng(10)
    outcomes = [_sequential_decision(*requests(rng, 48), TRUTH - 0.4, lambda t, v: stats.ratio_sequence(t, v, planned_n=48))
                for _ in range(200)]
    assert sum(d == "pass" for d, _ in outcomes) >= 190
    assert sum(d == "fail" for d, _ in outcomes) == 0
    assert np.median([n for _, n in outcomes]) < 48


def test_quotient_and_sample_size() -> None:
    q = stats.quotient(stats.Interval(2.0, 1.8, 2.2, 10, "fixed"), stats.Interval(1.0, 0.9, 1.1, 10, "fixed"))
    assert (q.estimate, q.low, q.high) == pytest.approx((2.0, 1.8 / 1.1, 2.2 / 0.9))
    assert stats.quotient(q, stats.Interval(0.1, -0.1, 0.3, 3, "fixed")).high == math.inf
    assert stats.fixed_sample_size(1.0, 0.5) == 43  # ((1.96 + 1.2816) * 2)^2 = 42.03 -> 43
    assert stats.ratio_interval([1.0] * 7, [1.0] * 7) is None  # below MIN_SAMPLES
