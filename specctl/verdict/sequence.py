"""The verify sequence: each gate's anytime-valid interval after every request, replayed from the
requests a run recorded.

Verify looks after every request once `stats.MIN_SAMPLES` have come back and stops a point as soon
as every gate's sequential interval lies on one side of its threshold (points.py). The ledger keeps
each request's counters and latencies, so the same intervals can be computed again, look by look, for
a chart of how the interval narrowed toward (or across) the threshold. Pure: recorded dicts in,
dicts out.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from specctl.verdict import gates as gate
from specctl.verdict import stats
from specctl.verdict.measure import Measurement
from specctl.verdict.points import Baseline, baseline_from_dict, point_level

Replayed = Callable[[Measurement, Measurement | None, int, float], stats.Interval | None]

# the gates verify judges, each as verify computes its sequential interval (gates.evaluate)
MEASURES: dict[str, Replayed] = {
    "accept_length": lambda m, base, n, level: gate.accept_length(m, sequential=True, planned_n=n, level=level),
    "speedup": lambda m, base, n, level: (
        gate.speedup(m, base, sequential=True, planned_n=n, level=level) if base else None
    ),
    "ttft_s": lambda m, base, n, level: gate.ttft(m, sequential=True, planned_n=n, level=level),
}


def replay(
    verdict: Mapping[str, Any],
    measurements: Mapping[str, Any],
    *,
    planned_n: int | None = None,
    baseline: Baseline | None = None,
) -> list[dict[str, Any]]:
    """Per operating point of a recorded verdict, each gate's interval after every request.

    Args:
        verdict: a host's recorded verdict (`HostVerdict.to_dict`: `points` with their `gates`).
        measurements: the same host's recorded requests (`points.measurements_dict`).
        planned_n: the profile's `verify.requests` (the sequence is tightest there); None takes the
            most requests any point recorded.
        baseline: the baseline the speedup was judged against, per concurrency (none: no speedup).

    Returns one dict per point: `concurrency`, `planned`, `requests`, `stopped_early`, `level` and
    `gates`, each gate with `name`, `op`, `threshold`, the recorded `interval` (the verdict's) and
    `looks`: `{"n", "estimate", "low", "high"}` from the first look on. Accept length is replayed
    even where no gate holds it (threshold None), so a run without gates still has its sequence.
    """
    recorded = baseline_from_dict(measurements) if measurements else {}
    points = [p for p in verdict.get("points") or [] if int(p["concurrency"]) in recorded]
    if not points:
        return []
    planned = planned_n or max(len(m.generations) for m in recorded.values())
    level = point_level(len(verdict.get("points") or []))
    out = []
    for point in points:
        c = int(point["concurrency"])
        m = recorded[c]
        base = baseline.get(c) if baseline else None
        judged = [g for g in point.get("gates") or [] if g["name"] in MEASURES]
        if not any(g["name"] == "accept_length" for g in judged):
            judged.insert(0, {"name": "accept_length", "op": ">=", "threshold": None, "interval": None})
        gates = []
        for g in judged:
            looks = _looks(MEASURES[g["name"]], m, base, planned, level)
            if looks:
                gates.append({**{k: g.get(k) for k in ("name", "op", "threshold", "interval")}, "looks": looks})
        out.append(
            {
                "concurrency": c,
                "planned": planned,
                "requests": len(m.generations),
                "stopped_early": bool(point.get("stopped_early")),
                "level": level,
                "gates": gates,
            }
        )
    return out


def _looks(
    measure: Replayed, m: Measurement, base: Measurement | None, planned: int, level: float
) -> list[dict[str, Any]]:
    looks = []
    for n in range(stats.MIN_SAMPLES, len(m.generations) + 1):
        interval = measure(Measurement(m.generations[:n], m.wall_s), base, planned, level)
        if interval is not None:
            looks.append({"n": n, "estimate": interval.estimate, "low": interval.low, "high": interval.high})
    return looks
