"""`watch`'s arithmetic: the exposition format, a window from the engine's counters (exact) or its
gauge (weighted), discarded windows, and the verdict with its alpha spending over looks."""

from __future__ import annotations

import math
import random

import pytest

from specctl.verdict.drift import Expectation, judge, look_level
from specctl.verdict.prometheus import MetricsError, Sample, duplicate, parse, total, unusable
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


def test_the_exposition_format_is_read_by_prometheus_client() -> None:
    samples = parse(PAGE)
    assert samples[0].label("model_name") == 'a "b"\\c' and samples[0].value == 3.21
    assert total(samples, "sglang:generation_tokens_total") == 123456789 + 10  # summed over is_streaming
    assert total(samples, "sglang:generation_tokens_total", {"is_streaming": "true"}) == 10
    assert math.isnan(samples[3].value) and samples[4].value == math.inf
    assert total(samples, "sglang:spec_verify_calls_total") is None
    for page in ("ok 1\nbroken{x=1} 2\n", "<html><body>502 Bad Gateway</body></html>", "\x00\x01\xff\xfe"):
        with pytest.raises(MetricsError, match="not the Prometheus text format") as caught:
            parse(page)
        assert "html" not in str(caught.value) and "broken" not in str(caught.value)  # never the bytes
    assert duplicate(parse('a{x="1"} 1\nb 2\na{x="1"} 3\n')) == Sample("a", (("x", "1"),), 3.0)
    assert duplicate(parse('a{x="1"} 1\na{x="2"} 3\n')) is None
    assert [unusable(parse(f"a {v}"), "a") is not None for v in ("NaN", "+Inf", "-Inf", "-1", "0", "2.5")] == [
        True,
        True,
        True,
        True,
        False,
        False,
    ]


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
    assert "went back from 500 to 20 between two looks at one server" in (from_scrapes(went_back, NEW).discarded or "")
    switched = [Scrape(0, page(0, 0, 0, 3, 0), "r1 t0"), Scrape(5, page(9, 3, 1, 3, 0), "r2 t1")]
    assert "another server answered" in (from_scrapes(switched, NEW).discarded or "")
    missing = [Scrape(0, tuple(parse("x 1")), "r1"), Scrape(5, tuple(parse("x 2")), "r1")]
    assert "no sglang:generation_tokens_total on the engine's page" in (from_scrapes(missing, NEW).discarded or "")


def test_a_counter_absent_at_either_end_of_a_pair_drops_that_pair() -> None:
    """A counter first seen mid-window may hold its lifetime (9000 tokens over 2500 verify steps, 3.6):
    counted from 0 its first delta would be that lifetime against one interval's steps."""
    late = [
        Scrape(0, tuple(parse("sglang:num_requests_total 0\nsglang:generation_tokens_total 9000")), "r1"),
        Scrape(5, page(9090, 2530, 2, 3, 0), "r1"),
        Scrape(10, page(9180, 2560, 4, 3, 0), "r1"),
    ]
    w = from_scrapes(late, NEW)
    assert w.discarded is None and w.pairs == ((90, 30),) and w.requests == 2
    gone = [Scrape(0, page(0, 0, 0, 3, 0), "r1"), Scrape(5, page(90, 30, 2, 3, 0), "r1")]
    gone.append(Scrape(10, tuple(parse("sglang:generation_tokens_total 180\nsglang:num_requests_total 4")), "r1"))
    assert from_scrapes(gone, NEW).pairs == ((90, 30),)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ('sglang:generation_tokens_total{model_name="m"} NaN', 'sglang:generation_tokens_total{model_name="m"} is nan'),
        ('sglang:generation_tokens_total{model_name="m"} +Inf', "is inf"),
        ('sglang:spec_verify_calls_total{model_name="m"} -Inf', "is -inf"),
        ('sglang:num_requests_total{model_name="m"} NaN', "sglang:num_requests_total"),
        ('sglang:spec_verify_calls_total{model_name="m"} -3', "is -3.0"),
        ('sglang:generation_tokens_total{model_name="m"} 5', 'generation_tokens_total{model_name="m"} appears twice'),
    ],
)
def test_a_value_no_window_can_use_or_a_series_twice_discards_the_window(text: str, why: str) -> None:
    """Never `ok`, never summed: the window is discarded (its verdict unknown) with the reason."""
    good = [Scrape(float(i), page(100 * i, 30 * i, 3 * i, 3, 0), "r1") for i in range(4)]
    hostile = Scrape(4.0, (*page(400, 120, 12, 3, 0), *parse(text)), "r1")
    if "twice" not in why:  # the hostile series replaces the page's own
        name = text.split("{")[0].split(" ")[0]
        hostile = Scrape(4.0, (*(s for s in page(400, 120, 12, 3, 0) if s.name != name), *parse(text)), "r1")
    w = from_scrapes([*good, hostile], NEW)
    assert why in (w.discarded or "") and w.pairs == ()
    verdict = judge(w, Expectation(gate=3.0, verified_low=3.4, tolerance=0.3), 1)
    assert verdict.state == "unknown" and why in verdict.reason


def test_a_gauge_no_window_can_use_discards_an_old_engines_window() -> None:
    looks = [Scrape(float(i), page(0, 0, i, 3.0, 100 * i), "r1") for i in range(3)]
    looks.append(
        Scrape(
            3.0,
            (
                *(s for s in page(0, 0, 3, 3.0, 300) if "accept" not in s.name),
                *parse('sglang:spec_accept_length{model_name="m",tp_rank="0"} NaN'),
            ),
            "r1",
        )
    )
    assert "sglang:spec_accept_length" in (from_scrapes(looks, OLD).discarded or "")


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


def test_a_window_holding_a_value_that_is_not_finite_is_never_ok() -> None:
    """NaN compares false with every floor: without the check it read as `ok` (a probe's or any window's)."""
    verified = Expectation(gate=3.0, verified_low=3.4, tolerance=0.3)
    for bad in (math.nan, math.inf):
        pairs = (*window(3.55).pairs, (bad, 10.0))
        verdict = judge(Window(0, 60, "probe", pairs, requests=120), verified, 1)
        assert verdict.state == "unknown" and "not finite" in verdict.reason


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
