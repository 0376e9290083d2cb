"""One window of serving traffic, from the engine's own counters: pure arithmetic, no I/O.

`watch` looks at the engine's `/metrics` every few seconds during a window. Accept length over the
window is a ratio of sums, Σ tokens / Σ verify steps, and each pair of consecutive looks is one
observation of such a pair (the interval is then the ratio estimator's, as verify's per request):

- `counters`: the engine counts verify steps (sglang 0.5.13+: `spec_verify_calls_total`, beside
  `generation_tokens_total`): the window's ratio is exact, in the same definition as a request's
  `completion_tokens / spec_verify_ct` that verify measured. Both move as requests finish.
- `gauge`: older engines publish only a gauge, the mean accept length over their last few decode
  batches (sglang: 40), and a counter of tokens. Each look's gauge stands for the tokens generated
  since the look before, so the window's ratio is Σ ΔN / Σ (ΔN / L). It is an approximation (a
  gauge's batches may straddle two looks) and the window says so. A look after no new tokens adds
  nothing (the gauge is sticky: it repeats its last value while idle), nor does a gauge of 0 (no
  decode logged yet).
- `probe`: pairs measured per request on a small probe the watch sent itself (flows build these).

A lifetime average (sglang's `/server_info`) cannot be cut into windows and is never used. A window is
discarded, with why (its verdict is then `unknown`: never `ok`, never a sum, never an action), when
its looks were answered by different servers (a restart, a release switch), when a counter went back
between two looks at one server, when a page holds one series twice, or when a series it reads is
NaN, ±Inf or negative. A pair of looks where a counter is absent at either end is dropped: a counter
that first appears mid-window (a labelled counter appears with its first increment, or the engine
exports it late) may already hold its lifetime, and counting it from 0 would take that lifetime for
one interval's traffic. A new counter so costs one pair of looks.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from specctl.verdict import prometheus
from specctl.verdict.prometheus import Sample, mean, total

__all__ = ["Scrape", "Source", "Window", "from_scrapes"]


@dataclass(frozen=True)
class Source:
    """Which series carry acceptance on one engine version (the engine's module says)."""

    accept_length: str  # the gauge: mean accept length over the engine's last decode-log interval
    tokens: str  # counter: tokens generated (as requests finish)
    requests: str  # counter: requests finished
    verify_calls: str | None = None  # counter: verify steps (the exact ratio), where the engine has one
    decode_tokens: str | None = None  # counter moving with every decode step (weights the gauge), if any
    decode_match: Mapping[str, str] = field(default_factory=dict)  # its labels, e.g. {"mode": "decode"}


@dataclass(frozen=True)
class Scrape:
    """One look at the engine: when, what `/metrics` said, and which server answered (the release's
    run id and its process's start, so a restart or a switch shows)."""

    at: float
    samples: tuple[Sample, ...]
    serving: str


@dataclass(frozen=True)
class Window:
    start: float
    end: float
    method: str  # "counters" | "gauge" | "probe"
    pairs: tuple[tuple[float, float], ...] = ()  # (tokens, verify steps), one per observation
    requests: int = 0  # finished in the window
    discarded: str | None = None  # why it cannot be judged
    note: str = ""  # how the ratio was formed, when it is an approximation

    @property
    def accept_length(self) -> float | None:
        steps = sum(s for _, s in self.pairs)
        return sum(t for t, _ in self.pairs) / steps if steps else None

    def to_dict(self) -> dict[str, object]:
        return {
            "start": self.start,
            "end": self.end,
            "method": self.method,
            "observations": len(self.pairs),
            "requests": self.requests,
            "accept_length": self.accept_length,
            "discarded": self.discarded,
            "note": self.note,
        }


class _Unusable(Exception):
    """Why a window cannot be judged at all (its `discarded`)."""


def _read(scrape: Scrape, name: str, match: Mapping[str, str] | None = None, *, gauge: bool = False) -> float | None:
    """A counter's total (a gauge's mean) on one look, after the checks every read makes: None when the
    page has no such series."""
    bad = prometheus.unusable(scrape.samples, name)
    if bad is not None:
        raise _Unusable(f"{bad.series()} is {bad.value!r} on the engine's page (a count is finite and not negative)")
    return (mean if gauge else total)(scrape.samples, name, match)


def from_scrapes(scrapes: Sequence[Scrape], source: Source) -> Window:
    method = "counters" if source.verify_calls else "gauge"
    if len(scrapes) < 2:
        at = scrapes[0].at if scrapes else 0.0
        return Window(at, at, method, discarded="fewer than two looks at the engine in the window")
    start, end = scrapes[0].at, scrapes[-1].at
    servers = list(dict.fromkeys(s.serving for s in scrapes))
    if len(servers) > 1:
        return Window(
            start, end, method, discarded=f"another server answered during the window ({' -> '.join(servers)})"
        )
    try:
        return _counted(scrapes, source, method)
    except _Unusable as why:
        return Window(start, end, method, discarded=str(why))


def _counted(scrapes: Sequence[Scrape], source: Source, method: str) -> Window:
    start, end = scrapes[0].at, scrapes[-1].at
    for s in scrapes:
        twice = prometheus.duplicate(s.samples)
        if twice is not None:
            raise _Unusable(f"{twice.series()} appears twice on one page of the engine's (never summed)")
    weight = source.verify_calls or source.decode_tokens or source.tokens
    weight_match = source.decode_match if weight == source.decode_tokens else {}
    names = {"tokens": source.tokens, "requests": source.requests, "weight": weight}
    series = {
        "tokens": [_read(s, source.tokens) for s in scrapes],
        "requests": [_read(s, source.requests) for s in scrapes],
        "weight": [_read(s, weight, weight_match) for s in scrapes],
    }
    gauges = [_read(s, source.accept_length, gauge=True) for s in scrapes] if not source.verify_calls else []
    for what, values in series.items():
        if all(v is None for v in values):
            raise _Unusable(f"no {names[what]} on the engine's page (a counter appears once it first counts)")
        for a, b in zip(values, values[1:], strict=False):
            if a is not None and b is not None and b < a:
                raise _Unusable(f"{names[what]} went back from {a:g} to {b:g} between two looks at one server")
    # a pair of looks is an observation only where every counter it reads is on both pages
    kept = [
        i
        for i in range(1, len(scrapes))
        if all(values[i - 1] is not None and values[i] is not None for values in series.values())
    ]
    tokens, weights, requested = (
        [0.0 if v is None else v for v in series[what]] for what in ("tokens", "weight", "requests")
    )
    requests = int(sum(requested[i] - requested[i - 1] for i in kept))
    pairs: list[tuple[float, float]] = []
    if source.verify_calls:
        for i in kept:
            steps = weights[i] - weights[i - 1]
            if steps > 0:
                pairs.append((tokens[i] - tokens[i - 1], steps))
        return Window(start, end, method, tuple(pairs), requests)
    for i in kept:
        generated = weights[i] - weights[i - 1]
        gauge = gauges[i]
        if generated > 0 and gauge:
            pairs.append((generated, generated / gauge))
    note = (
        f"from the {source.accept_length} gauge (the engine's mean over its last decode batches), "
        f"each look weighted by the {weight} generated since the look before"
    )
    return Window(start, end, method, tuple(pairs), requests, note=note)
