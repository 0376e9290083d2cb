"""What `runs --plot` and `show` say of `watch`'s windows, read from a real ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from specctl.ledger.ledger import Ledger
from specctl.ledger.records import WatchWindow


def _ledger(path: Path) -> str:
    book = Ledger(path)
    with book.recording(
        "20261203T100000Z-aaaaaa",
        "watch",
        command="specctl watch p",
        hosts=["h0"],
        profile={"metadata": {"name": "p", "version": 1}},
    ):
        pass
    expected = {"expected": {"gate": 3.0, "verified_low": 3.4, "tolerance": 0.3}}
    for i, (state, estimate) in enumerate([("ok", 3.5), ("ok", 3.45), ("unknown", None), ("degraded", 1.9)]):
        at = f"2026-12-03T10:{i:02d}:00Z"
        interval = (estimate, estimate - 0.2, estimate + 0.2) if estimate else (None, None, None)
        book.record_window(
            WatchWindow(
                "20261203T100000Z-aaaaaa",
                "h0",
                "r1",
                "p",
                at,
                at,
                state,
                i + 1 if estimate else 0,
                *interval,
                3.1,
                "counters",
                20,
                "alert" if state == "degraded" else None,
                expected,
            )
        )
    book.close()
    return str(path)


def test_the_plot_shows_windows_against_the_floor_and_show_lists_them(cli: Any, tmp_path: Path) -> None:
    ledger = _ledger(tmp_path / "ledger.db")
    page = tmp_path / "trend.html"
    plot = cli("runs", "--plot", "--plot-file", str(page), "--ledger", ledger)
    assert plot.code == 0, plot.stdout + plot.stderr
    assert "watch h0" in plot.stdout and "4 windows, 1 degraded; floor 3.1" in plot.stdout
    report = page.read_text()
    assert report.count("<svg") == 1 and "watch: p on h0" in report and "time (UTC)" in report
    assert "floor (r1)" in report and "verified lower bound (r1)" in report and "degraded window" in report
    data = cli("--json", "runs", "--plot", "--ledger", ledger).json()
    assert [w["state"] for w in data["watch"]] == ["ok", "ok", "unknown", "degraded"]
    shown = cli("--json", "show", "20261203T100000Z-aaaaaa", "--ledger", ledger).json()
    assert [w["look"] for w in shown["windows"]] == [1, 2, 0, 4] and shown["windows"][3]["action"] == "alert"
    text = cli("show", "20261203T100000Z-aaaaaa", "--ledger", ledger)
    assert text.code == 0 and "degraded" in text.stdout and "1.90 [1.70, 2.10]" in text.stdout
