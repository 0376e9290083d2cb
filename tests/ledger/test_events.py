"""Step events (migration 3; migration 4 renames its column to `step`): each step boundary of a run on
a host is a numbered row, written in its own transaction, read back in order by `events` and with
the run by `get`."""

from __future__ import annotations

import json
import sqlite3
import threading
from pathlib import Path

import pytest

from specctl.ledger.ledger import Ledger
from specctl.ledger.records import StepEvent
from specctl.ledger.schema import EVENTS, MIGRATIONS, SCHEMA_VERSION


def test_events_are_numbered_per_run_and_read_back_in_order(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db")
    book.begin("r", "deploy", command="c", hosts=["h1", "h2"])
    book.begin("other", "deploy", command="c")
    assert book.record_event("r", "h1", "preflight", "began") == 1
    assert book.record_event("r", "h1", "preflight", "ended") == 2
    assert book.record_event("other", "h1", "start", "began") == 1  # numbers are per run
    assert book.record_event("r", "h1", "start", "failed", json.dumps({"exit": 1})) == 3
    assert book.record_event("r", "h1", "preflight", "undone") == 4
    got = book.events("r")
    assert [(e.host, e.step, e.event) for e in got] == [
        ("h1", "preflight", "began"),
        ("h1", "preflight", "ended"),
        ("h1", "start", "failed"),
        ("h1", "preflight", "undone"),
    ]
    assert got[2].detail is not None and json.loads(got[2].detail) == {"exit": 1} and got[0].detail is None
    assert all(e.at.endswith("Z") for e in got) and [e.at for e in got] == sorted(e.at for e in got)
    assert book.events("nope") == []
    book.close()


def test_an_unknown_event_is_refused(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db")
    book.begin("r", "deploy", command="c")
    with pytest.raises(ValueError, match="undo-failed"):
        book.record_event("r", "h", "start", "started")
    assert set(EVENTS) == {"began", "ended", "failed", "undone", "undo-failed"}
    book.close()


def test_get_carries_the_events_and_listings_skip_them(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db")
    book.begin("r", "deploy", command="c")
    book.record_event("r", "h", "switch", "began", "current -> r")
    whole = book.get("r")
    assert whole.events is not None
    (event,) = whole.events
    assert event == StepEvent("h", "switch", "began", event.at, "current -> r")
    assert whole.to_dict()["events"] == [
        {"host": "h", "step": "switch", "event": "began", "at": event.at, "detail": "current -> r"}
    ]
    listed = book.runs()[0]
    assert listed.events is None and "events" not in listed.to_dict()
    json.dumps(whole.to_dict())  # what `show --json` prints and each release directory keeps
    book.close()


def test_hosts_recording_at_once_never_share_a_number(tmp_path: Path) -> None:
    """Host threads on one connection, and a second connection (another process's ledger) at once."""
    path = tmp_path / "l.db"
    book, other = Ledger(path), Ledger(path)
    book.begin("r", "deploy", command="c")
    failures: list[BaseException] = []

    def emit(ledger: Ledger, host: str) -> None:
        try:
            for i in range(25):
                ledger.record_event("r", host, f"stage-{i}", "began")
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=emit, args=(book if n % 2 else other, f"h{n}")) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert failures == []
    seqs = [row[0] for row in book.db.execute("SELECT seq FROM run_events WHERE run_id = 'r' ORDER BY seq")]
    assert seqs == list(range(1, 201))
    for n in range(8):  # each host's own events keep their order
        assert [e.step for e in book.events("r") if e.host == f"h{n}"] == [f"stage-{i}" for i in range(25)]
    other.close()
    book.close()


def test_a_ledger_at_schema_2_gains_the_events_table(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + MIGRATIONS[1] + "; PRAGMA user_version = 2;")
    db.execute(
        "INSERT INTO runs (id, kind, command, user, machine, pid, status, started_at) "
        "VALUES ('old', 'deploy', 'specctl deploy', 'u', 'm', 1, 'succeeded', '2026-01-01T00:00:00Z')"
    )
    db.commit()
    db.close()
    book = Ledger(path)
    assert book.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    assert book.get("old").events == () and book.record_event("old", "h", "verify", "began") == 1
    book.close()
    reader = Ledger(path, readonly=True)
    assert [e.step for e in reader.events("old")] == ["verify"]
    reader.close()


def _schema_3_ledger(path: Path) -> None:
    """A ledger as specctl wrote it before migration 4: its events' column named `stage`."""
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + MIGRATIONS[1] + MIGRATIONS[2] + "; PRAGMA user_version = 3;")
    db.execute(
        "INSERT INTO runs (id, kind, command, user, machine, pid, status, started_at) "
        "VALUES ('old', 'deploy', 'specctl deploy', 'u', 'm', 1, 'succeeded', '2026-01-01T00:00:00Z')"
    )
    db.execute("INSERT INTO run_events VALUES ('old', 1, 'h', 'switch', 'ended', '2026-01-01T00:00:01Z', NULL)")
    db.commit()
    db.close()


def test_a_ledger_at_schema_3_reads_as_it_is_and_migrates_its_column_to_step(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    _schema_3_ledger(path)
    reader = Ledger(path, readonly=True)  # a reading command migrates nothing, and still reads it
    assert [(e.host, e.step, e.event) for e in reader.events("old")] == [("h", "switch", "ended")]
    assert reader.get("old").to_dict()["events"][0]["step"] == "switch"
    reader.close()
    assert sqlite3.connect(path).execute("PRAGMA user_version").fetchone()[0] == 3
    book = Ledger(path)
    assert book.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION == 6
    columns = [row[1] for row in book.db.execute("PRAGMA table_info(run_events)")]
    assert "step" in columns and "stage" not in columns
    assert book.record_event("old", "h", "verify", "began") == 2
    assert [e.step for e in book.events("old")] == ["switch", "verify"]
    book.close()
