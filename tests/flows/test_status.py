"""`status` in words: what runs, what is not current and when it stops itself, and what it cannot be
sure of (a deadline long past: the watchdog that should have stopped the server is gone)."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from specctl.flows.servers import WATCHDOG_SLACK_S, HostStatus
from specctl.release import release as rel
from tests.fakes.inputs import fast_inputs


def _at(offset_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset_s))


def test_a_server_past_its_deadline_is_said_to_have_lost_its_watchdog() -> None:
    soon, overdue, just_due = _at(600), _at(-WATCHDOG_SLACK_S - 60), _at(-5)
    servers = [
        {"release": "cur", "current": True},
        {"release": "new", "current": False, "confirm_by": soon, "watchdog": True},
        {"release": "old", "current": False, "confirm_by": overdue, "watchdog": False},
        {"release": "late", "current": False, "confirm_by": just_due, "watchdog": True},  # still at work
    ]
    text = HostStatus("h1", "cur", True, True, servers).summary
    assert f"new (stops itself at {soon})" in text
    assert f"old (was to stop itself at {overdue}: its watchdog is gone; `specctl stop` stops it)" in text
    assert f"late (stops itself at {just_due})" in text


def test_strangers_are_named_and_left_alone() -> None:
    text = HostStatus("h1", "cur", False, False, [], strangers=["pid 4711 (...) is not the server; left alone"]).summary
    assert text == "not running; pid 4711 (...) is not the server; left alone"


def test_the_serving_release_says_how_it_stands_and_since_when() -> None:
    current = [{"release": "r1", "current": True}]
    text = HostStatus("h1", "r1", True, True, current, verification="UNVERIFIED").summary
    assert text == "healthy; r1 UNVERIFIED"
    text = HostStatus("h1", "r1", True, True, current, verification="verified at T", serving_since="S").summary
    assert text == "healthy; r1 verified at T (serving since S)"
    text = HostStatus("h1", "r1", False, False, [], verification="verified at T", serving_since="S").summary
    assert text == "not running; r1 verified at T"  # it is current, but nothing serves it


def test_two_servers_of_one_release_are_both_named() -> None:
    servers = [
        {"release": "cur", "current": True, "job": 11},
        {"release": "cur", "current": True, "job": 12},
        {"release": "new", "current": False, "job": 13},
        {"release": "new", "current": False, "job": 14},
    ]
    text = HostStatus("lab", "cur", True, True, servers).summary
    assert "2 SERVERS of cur: 11, 12" in text and "ALSO RUNNING, not current: new (13), new (14)" in text


def _watchdog_pids(base: str, run_id: str) -> list[int]:
    """The watchdog release.start left for the release: `sh -c WATCHDOG sh <base> <run id> ...`."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            argv = (entry / "cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[:2] == [b"sh", b"-c"] and argv[3:6] == [b"sh", base.encode(), run_id.encode()]:
            found.append(int(entry.name))
    return found


def test_a_server_whose_watchdog_was_killed_is_not_said_to_stop_itself(
    cli: Any, fake_hosts: Any, fake_engine: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A server not current, with a deadline in `confirm-by`: "stops itself at T" only while its
    watchdog is seen alive; once the watchdog is killed, status says it will not stop itself."""
    fake_hosts.add("h0")
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory()))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, hosts=["h0"])
    stray = rel.Release(fake_hosts.transport("h0"), str(fake_hosts.root("h0")), "tiny-llama-demo", "r-stray")
    rel.materialize(stray, {"launch.sh": (b"exec sleep 60\n", 0o755)})
    rel.start(stray, confirm_within_s=600)
    try:
        seen = cli("--json", "status", str(v1))
        [server] = seen.json()["hosts"][0]["servers"]
        assert server["release"] == "r-stray" and server["confirm_by"] and server["watchdog"] is True, server
        assert f"r-stray (stops itself at {server['confirm_by']})" in cli("status", str(v1)).stdout
        [watchdog] = _watchdog_pids(stray.base, "r-stray")
        os.kill(watchdog, signal.SIGKILL)
        deadline = time.monotonic() + 10
        while _watchdog_pids(stray.base, "r-stray"):
            assert time.monotonic() < deadline
            time.sleep(0.05)
        [server] = cli("--json", "status", str(v1)).json()["hosts"][0]["servers"]
        assert server["watchdog"] is False, server
        said = " ".join(cli("status", str(v1)).stdout.split())
        assert "stops itself at" not in said and "no watchdog is seen: it will not" in said, said
    finally:
        rel.stop(stray)
