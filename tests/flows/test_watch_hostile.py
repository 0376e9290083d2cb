"""`watch` against hostile `/metrics` pages and a killed server, end to end through the CLI (issue 34).

A release is deployed with the engine double (a live server, `current` naming it); its metrics are
then read from a real HTTP server on loopback (a stdlib `http.server` in this test) that answers each
look with the page the scenario writes: healthy traffic at an accept length of about 3.6 (the gate is
3.0), with one hostile thing in it. `watch --once --on-degraded plain` must take no action on any of
them (today's code switched the host on two), say `unknown` with the reason or `unreadable` (its
content type and size, never its bytes), and print JSON a strict reader takes (no NaN, no Infinity).
"""

from __future__ import annotations

import json
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from specctl.flows.session import HostSession
from tests.fakes.inputs import fast_inputs

TEXT = "text/plain; version=0.0.4; charset=utf-8"
# a window judged `ok` needs 9 looks or more (8 pairs with traffic); a hostile page shows from the second
# look on, so a short window says it even on a loaded machine whose looks take a few hundred ms each
WATCH = ["--once", "--look-every", "0.1s", "--on-degraded", "plain"]
LONG, SHORT = ["--window", "3s"], ["--window", "1s"]
Page = Callable[[int], tuple[str, bytes]]  # the look's number -> content type and body


def strict(text: str) -> Any:
    """JSON as RFC 8259 has it: NaN, Infinity and -Infinity are not JSON."""

    def refuse(token: str) -> Any:
        raise ValueError(f"{token} is not JSON")

    return json.loads(text, parse_constant=refuse)


def counters(k: int, *, drop: str = "", extra: str = "", before: int = 0) -> str:
    """The page at look k of a server that has answered 2 requests between looks at about 3.6 tokens a
    verify step (a little spread, so an interval forms), after `before` verify steps at that rate before
    the first look; `drop` leaves one series out, `extra` adds lines."""
    steps = before + sum(10 + i % 3 for i in range(k))
    tokens = 3.6 * before + sum((10 + i % 3) * (3.6 + 0.1 * (i % 2)) for i in range(k))
    lines = {
        "sglang:generation_tokens_total": f'sglang:generation_tokens_total{{model_name="m"}} {tokens!r}',
        "sglang:spec_verify_calls_total": f'sglang:spec_verify_calls_total{{model_name="m"}} {float(steps)!r}',
        "sglang:num_requests_total": f'sglang:num_requests_total{{model_name="m"}} {2.0 * k!r}',
        "sglang:spec_accept_length": 'sglang:spec_accept_length{model_name="m",tp_rank="0"} 3.6',
    }
    shown = [f"# TYPE {name} {'gauge' if 'accept' in name else 'counter'}\n{line}" for name, line in lines.items()]
    return "\n".join(line for name, line in zip(lines, shown, strict=True) if name != drop) + "\n" + extra


def text(page: Callable[[int], str]) -> Page:
    return lambda k: (TEXT, page(k).encode())


def hostile_at(k0: int, line: str, replaces: str) -> Page:
    """Healthy looks, then from look k0 on the series `replaces` has the hostile value `line`."""
    return text(lambda k: counters(k, drop=replaces if k >= k0 else "", extra=line + "\n" if k >= k0 else ""))


SCENARIOS: dict[str, tuple[Page, str, str]] = {  # name: the pages, the state, what the reason says
    "garbage": (lambda k: (TEXT, b"all systems nominal\n"), "unreadable", f"({TEXT}, 20 bytes)"),
    "html": (
        lambda k: ("text/html", b"<html><body><h1>502 Bad Gateway</h1></body></html>"),
        "unreadable",
        "(text/html, 50 bytes)",
    ),
    "binary": (lambda k: ("application/octet-stream", bytes(range(256))), "unreadable", "octet-stream, 256 bytes"),
    "nan": (
        hostile_at(1, 'sglang:generation_tokens_total{model_name="m"} NaN', "sglang:generation_tokens_total"),
        "unknown",
        "is nan",
    ),
    "+inf": (
        hostile_at(1, 'sglang:spec_verify_calls_total{model_name="m"} +Inf', "sglang:spec_verify_calls_total"),
        "unknown",
        "is inf",
    ),
    "-inf": (
        hostile_at(1, 'sglang:generation_tokens_total{model_name="m"} -Inf', "sglang:generation_tokens_total"),
        "unknown",
        "is -inf",
    ),
    "nan requests": (
        hostile_at(1, 'sglang:num_requests_total{model_name="m"} NaN', "sglang:num_requests_total"),
        "unknown",
        "sglang:num_requests_total",
    ),
    "negative": (
        hostile_at(1, 'sglang:spec_verify_calls_total{model_name="m"} -40', "sglang:spec_verify_calls_total"),
        "unknown",
        "is -40.0",
    ),
    # summed, today's code read twice the verify steps: accept length 1.8, DEGRADED, and switched the host
    "duplicate": (
        text(lambda k: counters(k, extra=counters(k).splitlines()[3] + "\n")),
        "unknown",
        "appears twice",
    ),
    # the verify counter appears after the first look holding its lifetime (2500 steps before the watch
    # began): counted from 0, its first delta was that lifetime against one interval's tokens, DEGRADED
    # (about 0.2), and today's code switched the host to plain decoding. The pair is dropped: ok
    "absent at first": (
        text(lambda k: counters(k, drop="sglang:spec_verify_calls_total" if k == 0 else "", before=2500)),
        "ok",
        "is not below 3.00",
    ),
    "went back": (
        text(lambda k: counters(k if k < 2 else k - 2)),
        "unknown",
        "went back",
    ),
}


class Stub:
    """A `/metrics` endpoint on loopback; each GET is the next look, answered by `page`."""

    def __init__(self) -> None:
        self.page: Page = text(counters)
        self.looks = 0
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                content_type, body = stub.page(stub.looks)
                stub.looks += 1
                self.send_response(200 if self.path == "/metrics" else 404)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def serve(self, page: Page) -> None:
        self.page, self.looks = page, 0

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def watched(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any, fake_engine: Any) -> Iterator[dict[str, Any]]:
    """v1 deployed with the engine double (unverified: judged on the gate 3.0), its metrics read from the stub."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, gates=True)
    common = ["--ledger", str(tmp_path / "ledger.db")]
    first = cli("--json", "deploy", str(v1), "--no-verify", *common)
    assert first.code == 0, first.stdout + first.stderr
    stub = Stub()
    monkeypatch.setattr(HostSession, "server_url", lambda self, release, port: stub.url)
    try:
        yield {"v1": str(v1), "common": common, "stub": stub, "release": first.json()["hosts"][0]["release"]}
    finally:
        stub.close()
        cli("stop", str(v1), *common)


def _watch(cli: Any, watched: dict[str, Any], window: list[str] = SHORT) -> tuple[int, dict[str, Any]]:
    done = cli("--json", "watch", watched["v1"], *WATCH, *window, *watched["common"])
    data = strict(done.stdout)  # one JSON document, strictly
    [row] = data["hosts"]
    return done.code, row


# three groups, each on a serving release of its own, so the pages are judged on several workers at once
GROUPS = {
    "unreadable": ("garbage", "html", "binary"),
    "values": ("nan", "+inf", "-inf", "nan requests", "negative"),
    "series": ("duplicate", "absent at first", "went back"),
}


def test_every_scenario_is_in_a_group() -> None:
    assert sorted(name for names in GROUPS.values() for name in names) == sorted(SCENARIOS)


@pytest.mark.parametrize("group", GROUPS)
def test_no_hostile_page_is_acted_on(cli: Any, watched: dict[str, Any], group: str) -> None:
    """Each page in turn, on one serving release: zero actions under `--on-degraded plain` (the issue's
    measure; today's code acted on two: a counter absent at the first look, a series twice)."""
    stub, seen = watched["stub"], {}
    if group == "unreadable":  # healthy pages are judged: a hostile page's state is its own
        code, control = _watch(cli, watched, LONG)
        assert (code, control["state"], control["action"]) == (0, "ok", None), control
        assert 3.5 < control["verdict"]["interval"]["estimate"] < 3.7
    for scenario in GROUPS[group]:
        page, state, _ = SCENARIOS[scenario]
        stub.serve(page)
        seen[scenario] = _watch(cli, watched, LONG if state == "ok" else SHORT)
    acted = {name: row["action"] for name, (code, row) in seen.items() if row["action"] or code == 4}
    assert acted == {}, acted
    assert all(code == 0 for code, _ in seen.values()), seen
    wrong = {
        name: (row["state"], row["reason"])
        for name, (_, row) in seen.items()
        if row["state"] != SCENARIOS[name][1] or SCENARIOS[name][2] not in (row["reason"] or "")
    }
    assert wrong == {}, wrong
    for _, row in seen.values():
        if row["state"] == "unreadable":  # said by its type and size, never its bytes
            assert "<html" not in json.dumps(row) and "nominal" not in json.dumps(row), row
    status = cli("--json", "status", watched["v1"]).json()["hosts"][0]
    assert status["current"] == watched["release"]  # still serving what it served


def test_watch_once_on_a_killed_server_is_down_exit_3(cli: Any, watched: dict[str, Any], fake_engine: Any) -> None:
    """`current` names a release no server of which runs: `down`, exit 3 (today: `unknown`, exit 0)."""
    servers = [s for s in fake_engine.started(release=watched["release"]) if s.alive]
    assert servers
    for server in servers:
        os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(s.alive for s in servers) and time.monotonic() < deadline:
        time.sleep(0.02)
    code, row = _watch(cli, watched)
    assert (code, row["state"], row["action"]) == (3, "down", None), row
    assert "no server of it runs" in row["reason"]
    shown = cli("watch", watched["v1"], *WATCH, *SHORT, *watched["common"])
    assert shown.code == 3 and "DOWN" in shown.stdout and "killed" in " ".join(shown.stdout.split()), shown.stdout
