"""Pooling hosts' requests (verdict/pooled.py): the ratio estimators over every request, the interval
per request, the total tok/s summed, and no speedup without the baselines."""

from __future__ import annotations

import pytest

from specctl.verdict import gates
from specctl.verdict.pooled import pool
from tests.ledger.test_pooled import requests


def test_pooled_accept_length_is_every_hosts_tokens_over_every_hosts_verify_steps() -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.55, 52.0, n=40, seed=2)
    pooled = pool([a, b], None, sequential=False)
    both = [*a.generations, *b.generations]
    tokens, steps = sum(g.completion_tokens for g in both), sum(g.spec_verify_ct or 0 for g in both)
    assert pooled["accept_length"]["estimate"] == pytest.approx(tokens / steps)
    assert pooled["requests"] == 64 and pooled["hosts"] == 2
    assert pooled["accept_length"]["n"] == 64 and pooled["accept_length"]["kind"] == "fixed"
    for alone in (a, b):  # hosts that agree: more requests, a narrower interval than either's
        own = gates.accept_length(alone)
        assert own is not None
        width = pooled["accept_length"]["high"] - pooled["accept_length"]["low"]
        assert width < own.high - own.low


def test_the_total_is_the_sum_of_the_hosts_and_there_is_no_pooled_wall_time() -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.5, 50.0, seed=2)
    pooled = pool([a, b], None, sequential=False)
    assert pooled["wall_tokens_per_s"] == pytest.approx(a.wall_tokens_per_s + b.wall_tokens_per_s, abs=0.01)
    assert "wall_s" not in pooled


def test_speedup_only_against_the_pooled_baselines() -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.5, 52.0, seed=2)
    base = requests(1.0, 40.0, seed=3)
    assert pool([a, b], None, sequential=False)["speedup"] is None
    pooled = pool([a, b], [base], sequential=False)
    joined = [*a.generations, *b.generations]
    tput = sum(g.completion_tokens for g in joined) / sum(g.e2e_latency_s or 0 for g in joined)
    base_tput = base.completion_tokens / sum(g.e2e_latency_s or 0 for g in base.generations)
    assert pooled["speedup"]["estimate"] == pytest.approx(tput / base_tput)
    assert pooled["speedup"]["low"] < pooled["speedup"]["estimate"] < pooled["speedup"]["high"]


def test_sequential_intervals_when_asked_and_nothing_to_pool_is_refused() -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.5, 50.0, seed=2)
    assert pool([a, b], None, sequential=True)["accept_length"]["kind"] == "sequential"
    with pytest.raises(ValueError, match="at least one"):
        pool([], None, sequential=False)
