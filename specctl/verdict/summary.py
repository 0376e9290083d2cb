"""The measured values people read first, each with its interval where it has one (pure).

Words as sglang means them: output throughput is completion tokens over the server's end-to-end
latency, which includes queueing, tokenisation and prefill; decode throughput leaves out the first
token (its latency is prefill) and needs `first_token_latency`, which sglang reports only with
`--enable-metrics`. sglang's proposed drafts are verify steps x (num_draft_tokens - 1): with
eagle_topk > 1 that counts the nodes of the draft tree, so the acceptance rate is per tree node."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from specctl.verdict import gates as gate
from specctl.verdict import stats
from specctl.verdict.measure import Measurement


def summarize(
    m: Measurement,
    baseline: Measurement | None,
    *,
    sequential: bool,
    planned_n: int,
    eagle_topk: int | None = None,
    level: float = stats.LEVEL,
) -> dict[str, Any]:
    """The measured values people read first, each with its interval (at `level`) where it has one."""

    def show(interval: stats.Interval | None) -> dict[str, Any] | None:
        return interval.to_dict() if interval else None

    def at(measure: Callable[..., stats.Interval | None], *args: Measurement) -> dict[str, Any] | None:
        return show(measure(*args, sequential=sequential, planned_n=planned_n, level=level))

    return {
        "requests": len(m.generations),
        "completion_tokens": m.completion_tokens,
        "wall_s": round(m.wall_s, 3),
        "wall_tokens_per_s": round(m.wall_tokens_per_s, 2),
        "accept_length": at(gate.accept_length, m),
        "acceptance_rate": at(gate.acceptance_rate, m),
        "acceptance_rate_per": "draft-tree node" if eagle_topk is not None and eagle_topk > 1 else "draft token",
        "drafts_per_verify": _drafts_per_verify(m),
        "output_tokens_per_s": at(gate.throughput, m),
        "decode_tokens_per_s": at(gate.decode_throughput, m),
        "ttft_s": at(gate.ttft, m),
        "inter_token_latency_s": at(gate.inter_token_latency, m),
        "speedup": at(gate.speedup, m, baseline) if baseline else None,
    }


def _drafts_per_verify(m: Measurement) -> float | None:
    """Σ proposed drafts / Σ verify steps: with eagle_topk 1 the num_steps the server actually ran,
    on average (adaptive speculation shows here), else the draft tree's size."""
    verify = sum(g.spec_verify_ct or 0 for g in m.generations)
    proposed = sum(g.spec_num_proposed_drafts or 0 for g in m.generations)
    return round(proposed / verify, 3) if verify else None


def current(summary: dict[str, Any]) -> dict[str, Any]:
    """A recorded summary in today's words: before this change the output throughput was recorded
    as `decode_tokens_per_s` (and `output_tokens_per_s` held the wall-clock rate)."""
    if "wall_tokens_per_s" in summary or not summary:
        return summary
    return {
        **summary,
        "wall_tokens_per_s": summary.get("output_tokens_per_s"),
        "output_tokens_per_s": summary.get("decode_tokens_per_s"),
        "decode_tokens_per_s": None,
    }
