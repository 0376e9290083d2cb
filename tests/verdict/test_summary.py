"""The summary's words mean what sglang means: output vs decode throughput, acceptance per tree node."""

from __future__ import annotations

import pytest

from specctl.verdict.generation import Generation
from specctl.verdict.measure import Measurement
from specctl.verdict.summary import summarize


def _g(tokens: int, e2e: float, ttft: float | None) -> Generation:
    return Generation(
        text="",
        output_ids=(),
        prompt_tokens=10,
        completion_tokens=tokens,
        finish_reason="length",
        e2e_latency_s=e2e,
        client_latency_s=e2e + 0.01,
        spec_verify_ct=tokens // 3,
        spec_num_correct_drafts=tokens // 2,
        spec_num_proposed_drafts=tokens,
        first_token_latency_s=ttft,
    )


def test_output_throughput_includes_prefill_and_decode_throughput_leaves_the_first_token_out() -> None:
    m = Measurement(tuple(_g(65, 2.0, 0.4) for _ in range(6)) + tuple(_g(33, 1.0, 0.2) for _ in range(6)), wall_s=20.0)
    s = summarize(m, None, sequential=False, planned_n=0)
    assert s["output_tokens_per_s"]["estimate"] == pytest.approx((6 * 65 + 6 * 33) / (6 * 2.0 + 6 * 1.0))
    assert s["decode_tokens_per_s"]["estimate"] == pytest.approx((6 * 64 + 6 * 32) / (6 * 1.6 + 6 * 0.8))
    assert s["decode_tokens_per_s"]["estimate"] > s["output_tokens_per_s"]["estimate"]
    assert s["wall_tokens_per_s"] == pytest.approx((6 * 65 + 6 * 33) / 20.0, abs=0.01)


def test_without_first_token_latency_there_is_no_decode_throughput() -> None:
    m = Measurement(tuple(_g(65, 2.0, None) for _ in range(8)), wall_s=16.0)
    assert summarize(m, None, sequential=False, planned_n=0)["decode_tokens_per_s"] is None


@pytest.mark.parametrize(("topk", "per"), [(None, "draft token"), (1, "draft token"), (4, "draft-tree node")])
def test_the_acceptance_rate_says_what_it_counts(topk: int | None, per: str) -> None:
    m = Measurement(tuple(_g(65, 2.0, 0.4) for _ in range(8)), wall_s=16.0)
    assert summarize(m, None, sequential=False, planned_n=0, eagle_topk=topk)["acceptance_rate_per"] == per
