"""Operating points: the pinned workload measured at each concurrency the profile names, gates
judged per point, and the error shared among the points.

With k points each point's intervals are taken at 1 - 0.05/k (Bonferroni), so the chance that any
gate of any point is decided wrongly stays within 5 %; each point stops early on its own once its
gates are decided by those (sequential) intervals. A speedup is always against the baseline
measured at the same point."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from specctl.profile.profile import Verify
from specctl.verdict import gates as gate
from specctl.verdict import stats
from specctl.verdict.client import EngineClient
from specctl.verdict.generation import Generation
from specctl.verdict.measure import Measurement, Prompts, measure
from specctl.verdict.summary import summarize

Baseline = Mapping[int, Measurement]  # concurrency -> what the target alone measured there


@dataclass(frozen=True)
class PointResult:
    """One operating point: what was measured there and how its gates came out."""

    concurrency: int
    measurement: Measurement
    gates: tuple[gate.GateResult, ...]
    summary: dict[str, Any]
    stopped_early: bool

    def to_dict(self) -> dict[str, Any]:
        return {
            "concurrency": self.concurrency,
            "gates": [g.to_dict() for g in self.gates],
            "summary": self.summary,
            "stopped_early": self.stopped_early,
        }


def point_level(points: int) -> float:
    """Each point's confidence, so that all points together keep stats.LEVEL."""
    return 1 - (1 - stats.LEVEL) / max(points, 1)


def gate_spec(v: Verify, concurrency: int) -> gate.GateSpec:
    return gate.GateSpec(
        v.threshold("min_accept_length", concurrency),
        v.threshold("min_speedup", concurrency),
        v.threshold("max_ttft_s", concurrency),
    )


def measure_points(
    client: EngineClient,
    prompts: Prompts,
    v: Verify,
    *,
    baseline: Baseline | None = None,
    gated: bool = True,
    eagle_topk: int | None = None,
    no_counters: str = gate.NO_COUNTERS,
    progress: Callable[[str], None] = lambda text: None,
    cancelled: Callable[[], bool] | None = None,
) -> list[PointResult]:
    """Measure every operating point of `v` in turn (ascending concurrency); `gated` False measures
    without gates (a baseline)."""
    level = point_level(len(v.points))
    several = len(v.points) > 1
    results = []
    for c in v.points:
        spec = gate_spec(v, c) if gated else gate.GateSpec()
        base = baseline.get(c) if baseline else None
        where = f"concurrency {c}: " if several else ""

        def decided(m: Measurement, spec: gate.GateSpec = spec, base: Measurement | None = base) -> bool:
            if len(m.generations) < stats.MIN_SAMPLES:
                return False
            found = gate.evaluate(
                spec, m, base, sequential=True, planned_n=v.requests, no_counters=no_counters, level=level
            )
            return bool(found) and gate.all_decided(found)

        def shown(i: int, g: Generation, where: str = where) -> None:
            progress(f"{where}request {i + 1}/{v.requests}")

        m = measure(
            client,
            prompts,
            requests=v.requests,
            max_new_tokens=v.max_new_tokens,
            temperature=v.temperature,
            concurrency=c,
            request_rate=v.request_rate,
            stream=v.stream,
            on_request=shown,
            enough=decided,
            cancelled=cancelled,
        )
        stopped = len(m.generations) < v.requests
        found = gate.evaluate(
            spec, m, base, sequential=stopped, planned_n=v.requests, no_counters=no_counters, level=level
        )
        summary = {
            "concurrency": c,
            **summarize(m, base, sequential=stopped, planned_n=v.requests, eagle_topk=eagle_topk, level=level),
        }
        results.append(
            PointResult(
                c, m, tuple(dataclasses.replace(g, concurrency=c) if several else g for g in found), summary, stopped
            )
        )
    return results


def measurements_dict(points: list[PointResult]) -> dict[str, Any]:
    """Every point's requests, for the ledger (a baseline is read back from it)."""
    return {"points": [{"concurrency": p.concurrency, **p.measurement.to_dict()} for p in points]}


def baseline_from_dict(data: Mapping[str, Any]) -> dict[int, Measurement]:
    """The inverse of measurements_dict; a record from before operating points is concurrency 1."""
    if "points" not in data:
        return {1: Measurement.from_dict(data)}
    return {int(p["concurrency"]): Measurement.from_dict(p) for p in data["points"]}


def baseline_rows(host: str, run_id: str, baseline: Baseline) -> list[dict[str, Any]]:
    """What `specctl baseline` shows: per operating point, the requests and the output throughput."""
    rows = []
    for c, m in sorted(baseline.items()):
        tput = gate.throughput(m)
        rows.append(
            {
                "host": host,
                "run": run_id,
                "concurrency": c,
                "requests": len(m.generations),
                "output_tokens_per_s": tput.to_dict() if tput else None,
                "wall_tokens_per_s": round(m.wall_tokens_per_s, 2),
            }
        )
    return rows
