"""The progress a long command shows per host (specctl/cli/_progress.py): plain lines each said once
without a terminal, a heartbeat for a quiet host, and one line per host that changes in place on one."""

from __future__ import annotations

import io

from rich.console import Console
from rich.text import Text

from specctl.cli._progress import PLAIN_HEARTBEAT_S, HostProgress


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def plain() -> tuple[HostProgress, io.StringIO, Clock]:
    buffer, clock = io.StringIO(), Clock()
    console = Console(file=buffer, width=80, no_color=True, highlight=False)
    return HostProgress(console, live=False, clock=clock), buffer, clock


def began(step: str) -> dict[str, object]:
    return {"event": "step", "step": step, "state": "began", "detail": None}


def test_plain_lines_say_each_stage_once_and_notes_but_not_what_a_host_does_meanwhile() -> None:
    shown, buffer, clock = plain()
    shown.event("h0", began("preflight"))
    shown.event("h0", {"event": "step", "step": "preflight", "state": "ended", "detail": None})
    shown.event("h0", {"event": "stage-progress", "done": 1})
    shown.event("h1", began("start"))
    for i in range(8):
        clock.now += 1
        shown.progress("h1", f"request {i + 1}/8")
    shown.note("h1", "took over the lock of alice@laptop")
    shown.note("h1", "took over the lock of alice@laptop")
    shown.event("h0", began("a-step-of-its-own"))
    shown.event("h0", began("candidate 1/9: topk=1,steps=3"))
    clock.now += 1
    shown.event("h0", began("start [topk=1,steps=3]"))  # a step of the candidate: what h0 does now
    assert buffer.getvalue().splitlines() == [
        "h0: preflight",
        "h1: starting",
        "h1: took over the lock of alice@laptop",
        "h0: a-step-of-its-own",
        "h0: candidate 1/9: topk=1,steps=3",
    ]
    assert shown._hosts["h0"].doing == "starting"


def test_a_quiet_host_is_heard_from_every_heartbeat_with_what_it_does_now() -> None:
    shown, buffer, clock = plain()
    shown.event("h0", began("verify"))
    shown.progress("h0", "request 1/200")
    clock.now += PLAIN_HEARTBEAT_S
    shown.progress("h0", "request 40/200")
    shown.progress("h0", "request 41/200")
    clock.now += PLAIN_HEARTBEAT_S - 1
    shown.progress("h0", "request 80/200")
    assert buffer.getvalue().splitlines() == ["h0: verifying", "h0: verifying: request 40/200"]


def test_on_a_terminal_one_line_per_host_changes_in_place_and_notes_stay() -> None:
    buffer, clock = io.StringIO(), Clock()
    console = Console(file=buffer, width=80, no_color=True, force_terminal=True, highlight=False)
    with HostProgress(console, live=True, clock=clock) as shown:
        shown.event("h0", began("start"))
        shown.event("gpu-node-7", began("verify"))
        shown.progress("gpu-node-7", "request 3/16")
        clock.now += 12
        lines = _text(shown)
        shown.note("h0", "verify failed: restoring 20261203T182427Z-9cc779")
    assert [line.split() for line in lines] == [
        ["h0", "12", "s", "starting"],
        ["gpu-node-7", "12", "s", "verifying", "request", "3/16"],
    ]
    assert "h0: verify failed: restoring 20261203T182427Z-9cc779\n" in Text.from_ansi(buffer.getvalue()).plain


def _text(shown: HostProgress) -> list[str]:
    """The live lines as a terminal 80 columns wide shows them at this moment."""
    screen = Console(file=io.StringIO(), width=80, no_color=True, highlight=False)
    with screen.capture() as captured:
        screen.print(shown)
    return captured.get().splitlines()
