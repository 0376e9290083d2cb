"""The measured values people read first, each with its interval where it has one (pure)."""

from __future__ import annotations

from typing import Any

from specctl.verdict import gates as gate
from specctl.verdict import stats
from specctl.verdict.measure import Measurement


def summarize(m: Measurement, baseline: Measurement | None, *, sequential: bool, planned_n: int) -> dict[str, Any]:
    """The measured values people read first, each with its interval where it has one."""
    def show(interval: stats.Interval | None) -> dict[str, Any] | None:
        return interval.to_dict() if interval else None

    return {
        "requests": len(m.generations), "completion_tokens": m.completion_tokens, "wall_s": round(m.wall_s, 3),
        "output_tokens_per_s": round(m.output_tokens_per_s, 2),
        "accept_length": show(gate.accept_length(m, sequential=sequential, planned_n=planned_n)),
        "acceptance_rate": show(gate.acceptance_rate(m, sequential=sequential, planned_n=planned_n)),
        "decode_tokens_per_s": show(gate.throughput(m, sequential=sequential, planned_n=planned_n)),
        "ttft_s": show(gate.ttft(m, sequential=sequential, planned_n=planned_n)),
        "speedup": show(gate.speedup(m, baseline, sequential=sequential, planned_n=planned_n)) if baseline else None,
    }
