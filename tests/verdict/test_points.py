"""Operating points against a real local HTTP server: requests really in flight together, a
seeded arrival schedule, gates per point with the error shared among the points."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler
from typing import Any

from specctl.profile.profile import Verify
from specctl.verdict import stats
from specctl.verdict.client import EngineClient
from specctl.verdict.measure import Prompts, _arrivals, measure
from specctl.verdict.points import baseline_from_dict, measure_points, measurements_dict, point_level
from specctl.verdict.workload import Workload
from tests.verdict.test_client_http import Behaviour, read_request, reply

WORKLOAD = Workload("w", "0" * 64, tuple(({"role": "user", "content": f"q{i}"},) for i in range(4)))


class Counting:
    """Answers each chat request after `delay_s`, with spec counters; counts the requests in flight."""

    def __init__(self, delay_s: float, tokens: int = 16, verify_ct: int = 4) -> None:
        self.delay_s, self.tokens, self.verify_ct = delay_s, tokens, verify_ct
        self.lock = threading.Lock()
        self.in_flight = self.most = self.seen = 0

    def __call__(self, handler: BaseHTTPRequestHandler, stop: threading.Event) -> None:
        read_request(handler)
        with self.lock:
            self.in_flight += 1
            self.seen += 1
            self.most = max(self.most, self.in_flight)
        stop.wait(self.delay_s)
        with self.lock:
            self.in_flight -= 1
        meta = {
            "id": "x",
            "prompt_tokens": 5,
            "completion_tokens": self.tokens,
            "e2e_latency": self.delay_s,
            "spec_verify_ct": self.verify_ct,
            "spec_num_correct_drafts": self.tokens - self.verify_ct,
            "spec_num_proposed_drafts": 3 * self.verify_ct,
        }
        reply(handler, 200, {"choices": [{"message": {"content": "x"}, "finish_reason": "length", "meta_info": meta}]})


def test_concurrency_keeps_that_many_requests_in_flight(serve: Callable[[Behaviour], str]) -> None:
    server = Counting(0.15)
    m = measure(EngineClient(serve(server)), Prompts(WORKLOAD), requests=12, max_new_tokens=16, concurrency=4)
    assert len(m.generations) == 12 and server.seen == 12 and server.most == 4
    assert m.wall_s < 12 * 0.15  # they overlapped


def test_early_stop_with_concurrency_finishes_what_was_sent(serve: Callable[[Behaviour], str]) -> None:
    server = Counting(0.05)
    m = measure(
        EngineClient(serve(server)),
        Prompts(WORKLOAD),
        requests=40,
        max_new_tokens=16,
        concurrency=4,
        enough=lambda m: len(m.generations) >= 8,
    )
    assert 8 <= len(m.generations) < 8 + 4 and server.seen == len(m.generations)


def test_a_request_rate_is_a_seeded_poisson_schedule() -> None:
    times = _arrivals(4.0, 400)
    assert times == _arrivals(4.0, 400) and times[0] == 0.0 and times == sorted(times)
    assert 80 < times[-1] < 120  # 400 arrivals at 4/s take about 100 s
    assert _arrivals(None, 3) == [0.0, 0.0, 0.0]


def test_each_point_has_its_gates_and_the_error_is_shared(serve: Callable[[Behaviour], str]) -> None:
    v = Verify(requests=8, max_new_tokens=16, concurrency=[1, 4], min_accept_length={1: 3.0, 4: 5.0})
    url = serve(Counting(0.01))
    results = measure_points(EngineClient(url), Prompts(WORKLOAD), v)
    assert [p.concurrency for p in results] == [1, 4]
    [g1], [g4] = (p.gates for p in results)
    assert (g1.label, g1.passed) == ("accept_length @1", True) and (g4.label, g4.passed) == ("accept_length @4", False)
    assert point_level(2) == 1 - (1 - stats.LEVEL) / 2
    interval: dict[str, Any] = results[0].summary["accept_length"]
    assert interval["estimate"] == 4.0 and results[0].summary["concurrency"] == 1
    # the ledger's form reads back as a baseline, per point; a record from before points is concurrency 1
    back = baseline_from_dict(json.loads(json.dumps(measurements_dict(results))))
    assert sorted(back) == [1, 4] and len(back[4].generations) == 8
    assert list(baseline_from_dict(results[0].measurement.to_dict())) == [1]


def test_a_speedup_is_against_the_baseline_at_the_same_point(serve: Callable[[Behaviour], str]) -> None:
    v = Verify(requests=8, max_new_tokens=16, concurrency=[1, 4])
    fast, slow = serve(Counting(0.01, tokens=16)), serve(Counting(0.01, tokens=8))
    base = {p.concurrency: p.measurement for p in measure_points(EngineClient(slow), Prompts(WORKLOAD), v, gated=False)}
    start = time.monotonic()
    results = measure_points(
        EngineClient(fast), Prompts(WORKLOAD), v.model_copy(update={"min_speedup": 1.5}), baseline=base
    )
    assert time.monotonic() - start < 10
    assert all(p.summary["speedup"]["estimate"] > 1.5 for p in results)  # twice the tokens in the same time
