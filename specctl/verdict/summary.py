"""The measured values people read first, each with its interval where it has one (pure).

Words as sglang means them: output throughput is completion tokens over the server's end-to-end
latency, which includes queueing, tokenisation and prefill; decode throughput leaves out the first
token (its latency is prefill) and needs `first_token_latency`, which sglang reports only with
`--enable-metrics`. sglang's proposed drafts are verify steps x (num_draft_tokens - 1): with
eagle_topk > 1 that counts the nodes of the draft tree, so the acceptance rate is per tree node."""

from __future__ import annotations

from typing import Any

from specctl.verdict import gates as gate
from specctl.verdict import stats
from specctl.verdict.measure import Measurement


def summarize(m: Measurement, baseline: Measurement | None, *, sequential: bool, planned_n: int,
              eagle_topk: int | None = None) -> dict[str, Any]:
    """The measured values people read first, each with its interval where it has one."""
    def show(interval: stats.Interval | None) -> dict[str, Any] | None:
        return interval.to_dict() if interval else None

    return {
        "requests": len(m.generations), "completion_tokens": m.completion_tokens, "wall_s": round(m.wall_s, 3),
        "wall_tokens_per_s": round(m.wall_tokens_per_s, 2),
        "accept_length": show(gate.accept_length(m, sequential=sequential, planned_n=planned_n)),
        "acceptance_rate": show(gate.acceptance_rate(m, sequential=sequential, planned_n=planned_n)),
        "acceptance_rate_per": "draft-tree node" if eagle_topk is not None and eagle_topk > 1 else "draft token",
        "output_tokens_per_s": show(gate.throughput(m, sequential=sequential, planned_n=planned_n)),
        "decode_tokens_per_s": show(gate.decode_throughput(m, sequential=sequential, planned_n=planned_n)),
        "ttft_s": show(gate.ttft(m, sequential=sequential, planned_n=planned_n)),
        "speedup": show(gate.speedup(m, baseline, sequential=sequential, planned_n=planned_n)) if baseline else None,
    }


def current(summary: dict[str, Any]) -> dict[str, Any]:
    """A recorded summary in today's words: before this change the output throughput was recorded
    as `decode_tokens_per_s` (and `output_tokens_per_s` held the wall-clock rate)."""
    if "wall_tokens_per_s" in summary or not summary:
        return summary
    return {**summary, "wall_tokens_per_s": summary.get("output_tokens_per_s"),
            "output_tokens_per_s": summary.get("decode_tokens_per_s"), "decode_tokens_per_s": None}
