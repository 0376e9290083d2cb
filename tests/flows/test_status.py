"""`status` in words: what runs, what is not current and when it stops itself, and what it cannot be
sure of (a deadline long past: the watchdog that should have stopped the server is gone)."""

from __future__ import annotations

import time

from specctl.flows.servers import WATCHDOG_SLACK_S, HostStatus


def _at(offset_s: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset_s))


def test_a_server_past_its_deadline_is_said_to_have_lost_its_watchdog() -> None:
    soon, overdue, just_due = _at(600), _at(-WATCHDOG_SLACK_S - 60), _at(-5)
    servers = [
        {"release": "cur", "current": True},
        {"release": "new", "current": False, "confirm_by": soon},
        {"release": "old", "current": False, "confirm_by": overdue},
        {"release": "late", "current": False, "confirm_by": just_due},  # its watchdog is still at work
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
