"""Pooling: several hosts' measurements of one operating point as one summary, with its intervals (pure).

Every figure of a summary is a ratio of sums over requests (Σ tokens / Σ verify steps, Σ tokens /
Σ seconds, Σ accepted / Σ proposed drafts, the mean time to first token), so pooling is
concatenation: the hosts' requests go into one Measurement and the same estimators run over it.
Each request then weighs as it does on its own host (a host that served more requests counts for
more), and the interval is the per-request one `stats` takes, now over every host's requests.

What is never pooled:

- the speedup, unless every host's baseline is at hand: it is then the pooled throughput over the
  pooled baselines' throughput (a baseline that several hosts were compared with counts once);
  without them it stays per host, and the pooled summary says None;
- the total tok/s (`wall_tokens_per_s`): hosts serve side by side, so their totals add up; the
  pooled value is their sum (no interval: each host's is one clock reading), and there is no
  pooled `wall_s`.

Whether the hosts measured the same thing is the caller's to say: pool the requests of one
operating point of one run, never across points, runs or workloads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specctl.verdict import stats
from specctl.verdict.measure import Measurement
from specctl.verdict.summary import summarize


def pool(
    hosts: Sequence[Measurement],
    baselines: Sequence[Measurement] | None,
    *,
    sequential: bool,
    level: float = stats.LEVEL,
    eagle_topk: int | None = None,
) -> dict[str, Any]:
    """One summary (the shape `summarize` returns) of the hosts' requests at one operating point.

    Args:
        hosts: each host's measurement of the point (at least one).
        baselines: the distinct baselines the hosts were compared with at this point, or None when
            any host's is unknown (then no pooled speedup).
        sequential: anytime-valid intervals (any host stopped early, so its requests came from a
            sequential design); else fixed-sample ones. The sequence is tightest at the requests
            pooled, and valid at any count.
        level: each interval's confidence (the per-point level of a verdict with several points).
        eagle_topk: the draft tree's width, which says what the acceptance rate counts.
    """
    if not hosts:
        raise ValueError("pooling needs at least one host's measurement")
    joined = Measurement(tuple(g for m in hosts for g in m.generations), wall_s=0.0)
    base = Measurement(tuple(g for b in baselines for g in b.generations), wall_s=0.0) if baselines else None
    summary = summarize(
        joined, base, sequential=sequential, planned_n=len(joined.generations), eagle_topk=eagle_topk, level=level
    )
    del summary["wall_s"]
    return {**summary, "hosts": len(hosts), "wall_tokens_per_s": round(sum(m.wall_tokens_per_s for m in hosts), 2)}
