"""Gates: the profile's thresholds against what the requests measured, each with its interval.

A gate is decided when its interval lies entirely on one side of the threshold. Verify stops early
only when every gate is decided by a sequential (anytime-valid) interval; when it runs to the
planned count it reports fixed-sample intervals and an undecided gate goes by its estimate.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specctl.verdict import stats
from specctl.verdict.generation import Generation
from specctl.verdict.measure import Measurement


@dataclass(frozen=True)
class GateResult:
    """One gate: measured value and interval beside the threshold."""

    name: str
    op: str  # ">=" or "<="
    threshold: float
    interval: stats.Interval | None
    passed: bool
    decided: bool
    note: str = ""
    concurrency: int | None = None  # the operating point, when verify measures several

    @property
    def label(self) -> str:
        return self.name if self.concurrency is None else f"{self.name} @{self.concurrency}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "op": self.op,
            "threshold": self.threshold,
            "passed": self.passed,
            "decided": self.decided,
            "note": self.note,
            **({"concurrency": self.concurrency} if self.concurrency is not None else {}),
            **({"interval": self.interval.to_dict()} if self.interval else {"interval": None}),
        }


@dataclass(frozen=True)
class GateSpec:
    """The thresholds verify applies (the profile's `verify` section)."""

    min_accept_length: float | None = None
    min_speedup: float | None = None
    max_ttft_s: float | None = None


def _interval(
    num: list[float], den: list[float], *, sequential: bool, planned_n: int, level: float
) -> stats.Interval | None:
    if sequential:
        return stats.ratio_sequence(num, den, planned_n=planned_n, level=level)
    return stats.ratio_interval(num, den, level=level)


def accept_length(
    m: Measurement, *, sequential: bool = False, planned_n: int = 0, level: float = stats.LEVEL
) -> stats.Interval | None:
    """Σ completion_tokens / Σ spec_verify_ct over the requests that speculated."""
    spec = [g for g in m.generations if g.spec_verify_ct]
    return _interval(
        [g.completion_tokens for g in spec],
        [float(g.spec_verify_ct or 0) for g in spec],
        sequential=sequential,
        planned_n=planned_n,
        level=level,
    )


def acceptance_rate(
    m: Measurement, *, sequential: bool = False, planned_n: int = 0, level: float = stats.LEVEL
) -> stats.Interval | None:
    """Σ accepted drafts / Σ proposed drafts: a proportion, so its interval stays inside [0, 1]."""
    spec = [g for g in m.generations if g.spec_num_proposed_drafts]
    accepted = [float(g.spec_num_correct_drafts or 0) for g in spec]
    proposed = [float(g.spec_num_proposed_drafts or 0) for g in spec]
    if sequential:
        return stats.proportion_sequence(accepted, proposed, planned_n=planned_n, level=level)
    return stats.proportion_interval(accepted, proposed, level=level)


def throughput(
    m: Measurement, *, sequential: bool = False, planned_n: int = 0, level: float = stats.LEVEL
) -> stats.Interval | None:
    """Output throughput: Σ completion tokens / Σ server e2e latency (queueing, tokenisation and
    prefill included), the client's latency where the server reports none."""
    return _interval(
        [float(g.completion_tokens) for g in m.generations],
        [g.e2e_latency_s if g.e2e_latency_s is not None else g.client_latency_s for g in m.generations],
        sequential=sequential,
        planned_n=planned_n,
        level=level,
    )


def decode_throughput(
    m: Measurement, *, sequential: bool = False, planned_n: int = 0, level: float = stats.LEVEL
) -> stats.Interval | None:
    """Decode throughput: Σ (completion tokens - 1) / Σ (e2e - first-token latency), over the
    requests that report both latencies (sglang: with --enable-metrics); None without them."""
    timed = [
        g
        for g in m.generations
        if g.first_token_latency_s is not None
        and g.e2e_latency_s is not None
        and g.completion_tokens > 1
        and g.e2e_latency_s > g.first_token_latency_s
    ]
    if not timed:
        return None
    return _interval(
        [float(g.completion_tokens - 1) for g in timed],
        [(g.e2e_latency_s or 0.0) - (g.first_token_latency_s or 0.0) for g in timed],
        sequential=sequential,
        planned_n=planned_n,
        level=level,
    )


def first_token_s(g: Generation) -> float | None:
    """Time to first token: where the client saw it (a streamed request), else the server's report."""
    return g.client_first_token_s if g.client_first_token_s is not None else g.first_token_latency_s


def ttft(
    m: Measurement, *, sequential: bool = False, planned_n: int = 0, level: float = stats.LEVEL
) -> stats.Interval | None:
    values = [t for g in m.generations if (t := first_token_s(g)) is not None]
    return _interval(values, [1.0] * len(values), sequential=sequential, planned_n=planned_n, level=level)


def inter_token_latency(
    m: Measurement, *, sequential: bool = False, planned_n: int = 0, level: float = stats.LEVEL
) -> stats.Interval | None:
    """Seconds per output token after the first, as the client saw them (streamed requests only):
    Σ (latency - time to first token) / Σ (tokens - 1)."""
    timed = [g for g in m.generations if g.client_first_token_s is not None and g.completion_tokens > 1]
    return _interval(
        [g.client_latency_s - (g.client_first_token_s or 0.0) for g in timed],
        [float(g.completion_tokens - 1) for g in timed],
        sequential=sequential,
        planned_n=planned_n,
        level=level,
    )


def speedup(
    m: Measurement, baseline: Measurement, *, sequential: bool = False, planned_n: int = 0, level: float = stats.LEVEL
) -> stats.Interval | None:
    """Throughput over the baseline's; each side at half the error, so the quotient keeps the level."""
    half_level = 1 - (1 - level) / 2
    top = throughput(m, sequential=sequential, planned_n=planned_n, level=half_level)
    bottom = throughput(baseline, level=half_level)
    return stats.quotient(top, bottom) if top and bottom else None


def _judge(name: str, op: str, threshold: float, interval: stats.Interval | None, missing: str) -> GateResult:
    if interval is None:
        return GateResult(name, op, threshold, None, False, True, missing)
    if op == ">=":
        decided = interval.low > threshold or interval.high < threshold
        passed = interval.low > threshold if decided else interval.estimate >= threshold
    else:
        decided = interval.high < threshold or interval.low > threshold
        passed = interval.high < threshold if decided else interval.estimate <= threshold
    return GateResult(
        name,
        op,
        threshold,
        interval,
        passed,
        decided,
        "" if decided else "the interval contains the threshold: judged by the estimate",
    )


NO_COUNTERS = "no speculative counters (spec_verify_ct) came back: is speculation on?"


def evaluate(
    spec: GateSpec,
    m: Measurement,
    baseline: Measurement | None,
    *,
    sequential: bool = False,
    planned_n: int = 0,
    no_counters: str = NO_COUNTERS,
    level: float = stats.LEVEL,
) -> list[GateResult]:
    """Every gate the profile sets, judged on the requests so far; `no_counters` says why an
    accept length cannot be judged when the engine returned no counters. `level` is each gate's
    confidence (lower it to share the error among several operating points)."""
    gates = []
    if spec.min_accept_length is not None:
        gates.append(
            _judge(
                "accept_length",
                ">=",
                spec.min_accept_length,
                accept_length(m, sequential=sequential, planned_n=planned_n, level=level),
                no_counters,
            )
        )
    if spec.min_speedup is not None:
        missing = "no baseline to compare with: run `specctl baseline` or pass --baseline auto"
        gates.append(
            _judge(
                "speedup",
                ">=",
                spec.min_speedup,
                speedup(m, baseline, sequential=sequential, planned_n=planned_n, level=level) if baseline else None,
                missing,
            )
        )
    if spec.max_ttft_s is not None:
        gates.append(
            _judge(
                "ttft_s",
                "<=",
                spec.max_ttft_s,
                ttft(m, sequential=sequential, planned_n=planned_n, level=level),
                "no time to first token: stream the requests (verify.stream) or add `enable-metrics: true` "
                "to engine.args",
            )
        )
    return gates


def all_decided(gates: list[GateResult]) -> bool:
    return all(g.decided for g in gates)
