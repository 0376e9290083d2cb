"""Intervals for the live verdict: pure arithmetic, no I/O.

Accept length and throughput are ratios of sums over requests (Σ tokens / Σ verify steps, Σ tokens
/ Σ seconds), so each request is one observation of a pair and the interval is the delta-method
(linearised) interval of a ratio estimator, with Student's t. Two kinds:

- `fixed`: the 95 % interval at a sample size chosen in advance;
- `sequential`: a confidence sequence (Robbins' normal mixture, in the asymptotic form of
  Waudby-Smith et al. 2021) that holds at every sample size at once, so verify may look after every
  request and stop as soon as the interval clears a gate without inflating its error rate.

The acceptance rate (Σ accepted / Σ proposed drafts) is a proportion: a symmetric interval around
an estimate near 1 would reach past 1 (seen: [0.602, 1.09]). Its intervals, of both kinds, are
taken on the logit scale, where the proportion is unbounded, and mapped back, so they stay inside
(0, 1); at the bounds themselves, where the linearised spread is zero, Wilson's score interval over
the pooled drafts stands in.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from statistics import NormalDist

LEVEL = 0.95
MIN_SAMPLES = 8  # fewer requests than this give no interval: the spread is not yet known


@dataclass(frozen=True)
class Interval:
    """An estimate with its interval; `kind` says which guarantee the bounds carry."""

    estimate: float
    low: float
    high: float
    n: int
    kind: str  # "fixed" | "sequential"

    def to_dict(self) -> dict[str, float | int | str]:
        return {"estimate": self.estimate, "low": self.low, "high": self.high, "n": self.n, "kind": self.kind}


def t_quantile(p: float, df: int) -> float:
    """Student's t quantile by the Cornish-Fisher expansion (Abramowitz and Stegun 26.7.5): within
    1e-3 at 4 degrees of freedom, 1e-5 from 9 on; no scipy needed."""
    z = NormalDist().inv_cdf(p)
    if df >= 1000:
        return z
    g1 = (z**3 + z) / 4
    g2 = (5 * z**5 + 16 * z**3 + 3 * z) / 96
    g3 = (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / 384
    g4 = (79 * z**9 + 776 * z**7 + 1482 * z**5 - 1920 * z**3 - 945 * z) / 92160
    return z + g1 / df + g2 / df**2 + g3 / df**3 + g4 / df**4


def _ratio_parts(numerators: Sequence[float], denominators: Sequence[float]) -> tuple[float, float, int]:
    """The ratio of sums and the standard deviation of its linearised residuals (per observation)."""
    n = len(numerators)
    total_den = sum(denominators)
    if n != len(denominators) or total_den <= 0:
        raise ValueError("a ratio needs as many denominators as numerators, with a positive sum")
    ratio = sum(numerators) / total_den
    mean_den = total_den / n
    residuals = [(y - ratio * x) / mean_den for y, x in zip(numerators, denominators, strict=True)]
    variance = sum(r * r for r in residuals) / (n - 1) if n > 1 else math.inf
    return ratio, math.sqrt(variance), n


def ratio_interval(numerators: Sequence[float], denominators: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Fixed-sample interval of Σ numerators / Σ denominators; None below MIN_SAMPLES."""
    if len(numerators) < MIN_SAMPLES:
        return None
    ratio, sd, n = _ratio_parts(numerators, denominators)
    half = t_quantile(0.5 + level / 2, n - 1) * sd / math.sqrt(n)
    return Interval(ratio, ratio - half, ratio + half, n, "fixed")


def proportion_interval(successes: Sequence[float], trials: Sequence[float], level: float = LEVEL) -> Interval | None:
    """Fixed-sample interval of Σ successes / Σ trials, inside [0, 1]; None below MIN_SAMPLES."""
    if len(successes) < MIN_SAMPLES:
        return None
    ratio, sd, n = _ratio_parts(successes, trials)
    multiplier = t_quantile(0.5 + level / 2, n - 1)
    low, high = _unit_bounds(ratio, sd / math.sqrt(n), multiplier, sum(trials))
    return Interval(ratio, low, high, n, "fixed")


def _unit_bounds(ratio: float, se: float, multiplier: float, trials: float) -> tuple[float, float]:
    """ratio ± multiplier x se taken on the logit scale and mapped back; Wilson's score interval
    over `trials` pooled draws where the logit or the spread is degenerate (every draft accepted,
    none, or all requests alike)."""
    if 0 < ratio < 1 and se > 0:
        centre = math.log(ratio / (1 - ratio))
        half = multiplier * se / (ratio * (1 - ratio))  # the delta method: d logit(p) / dp = 1 / (p (1 - p))
        return _expit(centre - half), _expit(centre + half)
    z2 = multiplier * multiplier / trials
    centre = (ratio + z2 / 2) / (1 + z2)
    half = multiplier * math.sqrt(ratio * (1 - ratio) / trials + z2 / (4 * trials)) / (1 + z2)
    low, high = max(0.0, centre - half), min(1.0, centre + half)
    return (0.0 if ratio <= 0 else low), (1.0 if ratio >= 1 else high)  # exact at the bound it estimates


def _expit(x: float) -> float:
    return 1 / (1 + math.exp(-x)) if x >= 0 else math.exp(x) / (1 + math.exp(x))


def mean_interval(values: Sequence[float], level: float = LEVEL) -> Interval | None:
    return ratio_interval(values, [1.0] * len(values), level)


def mixture_rho(alpha: float, planned_n: int) -> float:
    """The mixture width that makes the sequence tightest around `planned_n` samples."""
    log_term = -2 * math.log(alpha)
    return math.sqrt((log_term + math.log(log_term + 1)) / planned_n)


def sequence_radius(sd: float, n: int, alpha: float, rho: float) -> float:
    """Half-width after n samples of a two-sided (1 - alpha) normal-mixture confidence sequence."""
    a = n * rho * rho + 1
    return sd * math.sqrt(2 * a / (n * n * rho * rho) * math.log(math.sqrt(a) / alpha))


def ratio_sequence(
    numerators: Sequence[float], denominators: Sequence[float], *, planned_n: int, level: float = LEVEL
) -> Interval | None:
    """Anytime-valid interval of Σ numerators / Σ denominators (valid at every n, with optional stopping)."""
    if len(numerators) < MIN_SAMPLES:
        return None
    ratio, sd, n = _ratio_parts(numerators, denominators)
    alpha = 1 - level
    # the sequence assumes the spread is known; at a few requests it is not, so widen by t over z
    # (simulated coverage over n = 8..N with this: 0.96-0.97; without it 0.94 at N = 32)
    studentize = t_quantile(1 - alpha / 2, n - 1) / NormalDist().inv_cdf(1 - alpha / 2)
    half = studentize * sequence_radius(sd, n, alpha, mixture_rho(alpha, max(planned_n, MIN_SAMPLES)))
    return Interval(ratio, ratio - half, ratio + half, n, "sequential")


def proportion_sequence(
    successes: Sequence[float], trials: Sequence[float], *, planned_n: int, level: float = LEVEL
) -> Interval | None:
    """Anytime-valid interval of Σ successes / Σ trials, inside [0, 1]: the sequence's radius
    taken on the logit scale (as `proportion_interval` takes the fixed one)."""
    if len(successes) < MIN_SAMPLES:
        return None
    ratio, sd, n = _ratio_parts(successes, trials)
    alpha = 1 - level
    studentize = t_quantile(1 - alpha / 2, n - 1) / NormalDist().inv_cdf(1 - alpha / 2)
    # the radius is proportional to the spread: its multiplier of the standard error, at unit spread
    multiplier = (
        studentize * sequence_radius(1.0, n, alpha, mixture_rho(alpha, max(planned_n, MIN_SAMPLES))) * math.sqrt(n)
    )
    low, high = _unit_bounds(ratio, sd / math.sqrt(n), multiplier, sum(trials))
    return Interval(ratio, low, high, n, "sequential")


def quotient(top: Interval, bottom: Interval) -> Interval:
    """Interval of top / bottom from two independent intervals (each taken at half the error)."""
    if bottom.low <= 0:
        return Interval(top.estimate / bottom.estimate, 0.0, math.inf, top.n, top.kind)
    return Interval(top.estimate / bottom.estimate, top.low / bottom.high, top.high / bottom.low, top.n, top.kind)


def fixed_sample_size(sd: float, margin: float, alpha: float = 1 - LEVEL, power: float = 0.9) -> int:
    """Requests a fixed-count design needs to tell a mean `margin` away from a gate (two-sided alpha)."""
    z = NormalDist()
    return math.ceil(((z.inv_cdf(1 - alpha / 2) + z.inv_cdf(power)) * sd / margin) ** 2)
