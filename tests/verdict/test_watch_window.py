"""`watch`'s arithmetic: the exposition format, a window from the engine's counters (exact) or its
gauge (weighted), discarded windows, and the verdict with its alpha spending over looks."""

from __future__ import annotations

import math
import random

import pytest

from specctl.verdict.drift import Expectation, judge, look_level
from specctl.verdict.prometheus import MetricsError, parse, total
from specctl.verdict.window import Scrape, Source, Window, from_scrapes

PAGE = """# HELP sglang:spec_accept_length Mean acceptance length of speculative decoding.
# TYPE sglang:spec_accept_length gauge
sglang:spec_accept_length{engine_type="unified",model_name="a \\"b\\"\\\\c",tp_rank="0"} 3.21
sglang:generation_tokens_total{engine_type="unified",is_streaming="false",model_name="m"} 1.23456789e+08
sglang:generation_tokens_total{engine_type="unified",is_streaming="true",model_name="m"} 10.0
sglang:num_running_reqs NaN 1700000000000
up +Inf
"""
NEW = Source(
    "sglang:spec_accept_length",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    verify_calls="sglang:spec_verify_calls_total",
)
OLD = Source(
    "sglang:spec_accept_length",
    "sglang:generation_tokens_total",
    "sglang:num_requests_total",
    decode_tokens="sglang:realtime_tokens_total",
    decode_match={"mode": "decode"},
)


def test_the_exposition_format_is_read_as_prometheus_client_writes_it() -> None:
    samples = parse(PAGE)
    assert samples[0].label("model_name") == 'a "b"\\c' and samples[0].value == 3.21
    assert total(samples, "sglang:generation_tokens_total") == 123456789 + 10  # summed over is_streaming
    assert total(samples, "sglang:generation_tokens_total", {"is_streaming": "true"}) == 10
    assert math.isnan(samples[3].value) and samples[4].value == math.inf
    assert total(samples, "sglang:spec_verify_calls_total") is None
    with pytest.raises(MetricsError, match="line 2"):
        parse("ok 1\nbroken{x=1} 2\n")


def page(tokens: float, steps: float, requests: float, gauge: float, decode: float) -> tuple:
    text = (
        f'sglang:generation_tokens_total{{model_name="m"}} {tokens}\n'
        f'sglang:spec_verify_calls_total{{model_name="m"}} {steps}\n'
        f'sglang:num_requests_total{{model_name="m"}} {requests}\n'
        f'sglang:spec_accept_length{{model_name="m",tp_rank="0"}} {gauge}\n'
        f'sglang:realtime_tokens_total{{mode="decode"}} {decode}\n'
        f'sglang:realtime_tokens_total{{mode="prefill"}} 99999\n'
    )
    return tuple(parse(text))


def test_counters_give_the_exact_window_ratio() -> None:
    looks = [
        Scrape(0, page(100, 40, 3, 2.5, 0), "r1"),
        Scrape(5, page(130, 50, 5, 2.5, 0), "r1"),
        Scrape(10, page(130, 50, 5, 2.5, 0), "r1"),
        Scrape(15, page(190, 70, 9, 2.5, 0), "r1"),
    ]
    w = from_scrapes(looks, NEW)
    assert w.method == "counters" and w.pairs == ((30, 10), (60, 20)) and w.requests == 6
    assert w.accept_length == pytest.approx(90 / 30)


def test_an_old_engine_weights_its_gauge_by_the_decode_tokens_between_looks() -> None:
    looks = [
        Scrape(0, page(0, 0, 0, 0.0, 0), "r1"),  # 0.0: no decode logged yet
        Scrape(5, page(0, 0, 1, 3.0, 300), "r1"),
        Scrape(10, page(0, 0, 2, 3.0, 300), "r1"),  # idle: the sticky gauge adds nothing
        Scrape(15, page(0, 0, 4, 1.5, 450), "r1"),
    ]
    w = from_scrapes(looks, OLD)
    assert w.method == "gauge" and w.pairs == ((300, 100), (150, 100)) and "weighted" in w.note
    assert w.accept_length == pytest.approx(450 / 200)


def test_a_restart_or_a_switch_discards_the_window() -> None:
    went_back = [Scrape(0, page(500, 100, 9, 3, 0), "r1"), Scrape(5, page(20, 5, 1, 3, 0), "r1")]
    assert "went back" in (from_scrapes(went_back, NEW).discarded or "")
    switched = [Scrape(0, page(0, 0, 0, 3, 0), "r1 t0"), Scrape(5, page(9, 3, 1, 3, 0), "r2 t1")]
    assert "another server answered" in (from_scrapes(switched, NEW).discarded or "")
    missing = [Scrape(0, tuple(parse("x 1")), "r1"), Scrape(5, tuple(parse("x 2")), "r1")]
    assert "no sglang:generation_tokens_total on the engine's page" in (from_scrapes(missing, NEW).discarded or "")
    # a counter that first appears mid-window had counted nothing before
    late = [
        Scrape(0, tuple(parse("sglang:num_requests_total 0\nsglang:spec_accept_length 0")), "r1"),
        Scrape(5, page(90, 30, 2, 3, 0), "r1"),
    ]
    assert from_scrapes(late, NEW).pairs == ((90, 30),)


def window(mean: float, n: int = 40, seed: int = 0) -> Window:
    rng = random.Random(seed)
    pairs = []
    for _ in range(n):
        steps = rng.randint(20, 60)
        pairs.append((steps * max(1.0, rng.gauss(mean, 0.4)), float(steps)))
    return Window(0, 60, "counters", tuple(pairs), requests=n * 3)


def test_ok_degraded_and_unknown() -> None:
    verified = Expectation(gate=3.0, verified_low=3.4, tolerance=0.3)
    assert verified.floor == pytest.approx(3.1)
    assert judge(window(3.55), verified, 1).state == "ok"
    bad = judge(window(1.9), verified, 1)
    assert bad.state == "degraded" and bad.interval is not None and bad.interval.high < 3.1
    assert "3.10" in bad.reason and "verified lower bound 3.40" in bad.against
    quiet = judge(Window(0, 60, "counters", window(1.0).pairs[:3], requests=3), verified, 1)
    assert quiet.state == "unknown" and "too little traffic" in quiet.reason  # never degraded on a guess
    gone = judge(Window(0, 1, "counters", discarded="another server answered"), verified, 1)
    assert gone.state == "unknown" and gone.look == 0 and "discarded" in gone.reason


def test_a_release_never_verified_is_judged_on_the_gate_alone_and_says_so() -> None:
    gate_only = Expectation(gate=3.0, verified_low=None, tolerance=0.3)
    verdict = judge(window(2.2), gate_only, 1)
    assert verdict.state == "degraded" and verdict.floor == 3.0 and "gate alone" in verdict.against
    nothing = judge(window(2.2), Expectation(None, None, 0.3), 1)
    assert nothing.state == "unknown" and "nothing to judge against" in nothing.reason


def test_alpha_spending_bounds_false_alarms_over_unbounded_looks() -> None:
    misses = sum(1 - look_level(k) for k in range(1, 100_000))
    assert misses < 0.05 and look_level(1) == pytest.approx(1 - 0.05 * 6 / math.pi**2)
    assert look_level(100) > look_level(2) > look_level(1)  # later looks are taken at a stricter level
    # a release whose acceptance is exactly at its floor: over 300 looks, no false alarm
    at_floor = Expectation(gate=None, verified_low=3.3, tolerance=0.3)
    alarms = sum(judge(window(3.0, seed=k), at_floor, k).state == "degraded" for k in range(1, 301))
    assert alarms <= 2
