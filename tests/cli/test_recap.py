"""The recap a deploy, verify or rollback ends with (specctl/cli/recap.py), from the HostReport data
they print under --json: one row per host, the figures with their intervals, 80 columns."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console

from specctl.cli.recap import recap_view

NEW, OLD = "20261203T182427Z-9cc779", "20261202T101010Z-1a2b3c"


def verdict(passed: bool, accept: float, speedup: float | None = None) -> dict[str, Any]:
    summary: dict[str, Any] = {
        "accept_length": {"estimate": accept, "low": accept - 0.1, "high": accept + 0.1},
        "wall_tokens_per_s": 100.0,
    }
    if speedup is not None:
        summary["speedup"] = {"estimate": speedup, "low": speedup - 0.2, "high": speedup + 0.2}
    gate = {
        "name": "accept_length",
        "op": ">=",
        "threshold": 3.0,
        "passed": passed,
        "decided": True,
        "interval": summary["accept_length"],
    }
    return {"passed": passed, "gates": [gate], "summary": summary, "drift": [], "findings": []}


REPORTS = [
    {"host": "gpu-node-0017", "ok": True, "release": NEW, "detail": "ready in 41.0 s", "seconds": 73.4,
     "verdict": verdict(True, 3.56, 1.62)},
    {"host": "gpu-node-0018", "ok": True, "release": NEW, "detail": "ready in 40.2 s", "seconds": 80.1,
     "verdict": verdict(False, 1.91, 0.71), "rolled_back_to": OLD, "rollback_verdict": verdict(True, 3.49, 1.58)},
    {"host": "gpu-node-0019", "ok": False, "release": None, "detail": "gpu-node-0019: port 30000 is in use",
     "fix": "free the port, or set engine.port to another one", "seconds": 2.0, "verdict": None},
]  # fmt: skip


def shown(width: int, *, wide: bool = False) -> list[str]:
    console = Console(file=io.StringIO(), width=width, no_color=True, highlight=False)
    with console.capture() as captured:
        console.print(recap_view(REPORTS, title="deploy kimi v3", width=width, wide=wide))
    return [line.rstrip() for line in captured.get().splitlines()]


def test_one_row_per_host_with_intervals_and_the_release_that_serves_again() -> None:
    lines = shown(80)
    assert all(len(line) <= 80 for line in lines), lines
    assert lines[0] == "deploy kimi v3"
    assert lines[1].split() == ["host", "release", "state", "accept", "length", "speedup", "verdict", "time"]
    rows = [line.split() for line in lines[2:6]]
    assert rows[0] == ["gpu-node-0017", "9cc779", "serving", "3.56±0.10", "1.62±0.20x", "pass", "73", "s"]
    assert rows[1] == ["gpu-node-0018", "9cc779", "rolled", "back", "1.91±0.10", "0.71±0.20x", "FAIL", "80", "s"]
    assert rows[2] == ["1a2b3c", "serving", "again", "3.49±0.10", "1.58±0.20x", "pass"]
    assert rows[3] == ["gpu-node-0019", "-", "failed", "-", "-", "-", "2", "s"]
    said = " ".join(" ".join(lines[6:]).split())  # a long line folds at 80 columns
    assert said == (
        "gpu-node-0018: accept_length 1.91±0.10, needs >= 3.0: FAIL "
        f"gpu-node-0018: rolled back to {OLD}, the release that served before "
        "gpu-node-0019: port 30000 is in use (fix: free the port, or set engine.port to another one)"
    )


def test_narrower_drops_the_time_then_the_release_but_never_an_interval() -> None:
    header = shown(74)[1].split()
    assert "time" not in header and "release" in header
    narrow = shown(64)
    assert narrow[1].split() == ["host", "state", "accept", "length", "speedup", "verdict"]
    assert "3.56±0.10" in narrow[2] and "1.62±0.20x" in narrow[2]


def test_wide_shows_whole_release_ids() -> None:
    lines = shown(120, wide=True)
    assert any(NEW in line for line in lines) and any(line.lstrip().startswith(OLD) for line in lines)


def test_a_jobs_time_limit_is_said_however_short() -> None:
    """A scheduler ends the server at its time limit: the recap says it, a 1-minute limit too."""
    limit = "job 12: time limit 1:00, serving stops at 2026-12-05T02:00:00Z"
    report = {**REPORTS[0], "time_limit": limit}
    console = Console(file=io.StringIO(), width=80, no_color=True, highlight=False)
    with console.capture() as captured:
        console.print(recap_view([report], title="deploy", width=80, wide=False))
    assert f"gpu-node-0017: {limit}" in captured.get()
