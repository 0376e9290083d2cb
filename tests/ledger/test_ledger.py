"""The ledger on a real SQLite file: migrations, one transaction per state change, runs closed as
killed by a signal (in a real child process) or when their process vanished."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import pytest

from specctl.cancel import Cancelled, CancelToken
from specctl.errors import InputError, LedgerError
from specctl.ledger.ledger import Ledger
from specctl.ledger.schema import MIGRATIONS, SCHEMA_VERSION
from specctl.processes import start_time

PROFILE = {"metadata": {"name": "p", "version": 3}}


def test_a_new_ledger_is_at_the_newest_schema(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db")
    assert book.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    book.close()


def test_an_old_ledger_is_migrated_and_keeps_its_runs(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + "; PRAGMA user_version = 1;")
    db.execute(
        "INSERT INTO runs (id, kind, command, user, machine, pid, status, started_at) "
        "VALUES ('r1', 'deploy', 'specctl deploy', 'u', 'm', 1, 'succeeded', '2026-01-01T00:00:00Z')"
    )
    db.commit()
    db.close()
    book = Ledger(path)
    assert book.get("r1").status == "succeeded" and book.get("r1").parent is None  # column added by migration 2
    assert book.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    book.close()


def test_a_newer_ledger_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    db.commit()
    db.close()
    for readonly in (False, True):
        with pytest.raises(LedgerError, match="knows up to") as refused:
            Ledger(path, readonly=readonly)
        assert "upgrade specctl" in (refused.value.fix or "") and refused.value.path == str(path)


def test_recording_closes_runs_by_how_the_block_ends(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db")
    with book.recording("ok", "verify", command="c", profile=PROFILE, hosts=["h"]) as outcome:
        book.record_host("ok", "h", release="rel", verdict={"passed": True}, passed=True)
        outcome.verdict = {"passed": True}
    with pytest.raises(RuntimeError), book.recording("bad", "deploy", command="c"):
        raise RuntimeError("boom")
    with pytest.raises(Cancelled), book.recording("sig", "deploy", command="c"):
        token = CancelToken()
        token.cancel(signal.SIGTERM)
        token.check()
    assert [(r.id, r.status) for r in book.runs()] == [("ok", "succeeded"), ("bad", "failed"), ("sig", "killed")]
    ok = book.get("ok")
    assert ok.profile == "p" and ok.profile_version == 3 and ok.inputs["profile"] == PROFILE and ok.passed
    assert ok.host_records[0].release == "rel" and book.runs(host="h")[0].id == "ok" and book.runs(host="x") == []
    assert "boom" in (book.get("bad").verdict or {})["error"]
    book.finish("ok", "killed")  # a closed run keeps its first status
    assert book.get("ok").status == "succeeded"
    book.close()


def test_a_failed_write_leaves_nothing_half_written(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db")
    book.begin("r", "deploy", command="c")
    with pytest.raises(sqlite3.IntegrityError), book.transaction() as db:
        db.execute("INSERT INTO run_hosts (run_id, host) VALUES ('r', 'h1')")
        db.execute("INSERT INTO run_hosts (run_id, host) VALUES ('r', 'h1')")  # duplicate key: the whole change goes
    assert book.get("r").host_records == ()
    book.close()


def test_a_run_whose_process_vanished_is_closed_as_killed(tmp_path: Path) -> None:
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead_pid = int(child.stdout)
    book = Ledger(tmp_path / "l.db")
    book.begin("r", "deploy", command="c")
    book.db.execute("UPDATE runs SET pid = ? WHERE id = 'r'", (dead_pid,))
    book.close()
    again = Ledger(tmp_path / "l.db")
    assert again.get("r").status == "killed" and "gone" in (again.get("r").verdict or {})["note"]
    again.close()


def test_a_run_whose_pid_now_names_a_later_process_is_closed_as_killed(tmp_path: Path) -> None:
    """The run's process died and its pid was given to another (here: this process, started at
    another time than the row records): the pid alone would keep the run `running` forever."""
    book = Ledger(tmp_path / "l.db")
    book.begin("recycled", "deploy", command="c")
    book.begin("here", "deploy", command="c")
    assert book.db.execute("SELECT process_start FROM runs WHERE id = 'here'").fetchone()[0] == start_time(os.getpid())
    book.db.execute("UPDATE runs SET process_start = '1' WHERE id = 'recycled'")
    book.close()
    read = Ledger(tmp_path / "l.db", readonly=True)
    assert {r.id: r.status for r in read.runs()} == {"recycled": "killed", "here": "running"}
    read.close()


def test_a_read_closes_a_run_whose_process_vanished(tmp_path: Path) -> None:
    """`runs` and `show` open the ledger for reading: they must not show a killed run as running."""
    child = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    book = Ledger(tmp_path / "l.db")
    book.begin("gone", "deploy", command="c")
    book.begin("here", "deploy", command="c")  # this process: still running
    book.db.execute("UPDATE runs SET pid = ? WHERE id = 'gone'", (int(child.stdout),))
    book.close()
    read = Ledger(tmp_path / "l.db", readonly=True)
    assert {r.id: r.status for r in read.runs()} == {"gone": "killed", "here": "running"}
    assert "gone when the ledger was next read" in (read.get("gone").verdict or {})["note"]
    read.close()


def test_sigterm_closes_the_run_as_killed(tmp_path: Path) -> None:
    """A real process in the middle of a recorded run gets SIGTERM: the run is closed as killed."""
    script = textwrap.dedent(f"""
        import sys
        from specctl.cancel import on_signals
        from specctl.ledger.ledger import Ledger
        book = Ledger(__import__("pathlib").Path({str(tmp_path / "l.db")!r}))
        with on_signals() as cancel, book.recording("r", "deploy", command="c"):
            print("started", flush=True)
            while True:
                cancel.sleep(0.05)
    """)
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline().strip() == "started"
    child.send_signal(signal.SIGTERM)
    _, err = child.communicate(timeout=30)
    assert child.returncode != 0, err
    book = Ledger(tmp_path / "l.db")
    assert book.get("r").status == "killed"
    book.close()


def test_unknown_or_ambiguous_run_ids(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "l.db")
    for run_id in ("20261129T1-a", "20261129T1-b"):
        book.begin(run_id, "verify", command="c")
    assert book.get("20261129T1-a").id == "20261129T1-a"
    with pytest.raises(InputError, match="matches 2 runs"):
        book.get("20261129T1")
    with pytest.raises(InputError, match="no run"):
        book.get("nope")
    book.close()


def test_commands_opening_a_new_ledger_at_once_migrate_it_once(tmp_path: Path) -> None:
    """Two races of a new file: both read schema 0 and both migrate; both switch it to WAL, a lock
    SQLite does not wait for. Before the fixes, eight openers hit the first every time, the second
    about one time in thirty."""
    path = tmp_path / "l.db"
    opened: list[Ledger] = []
    failures: list[BaseException] = []

    def open_it() -> None:
        try:
            opened.append(Ledger(path))
        except BaseException as exc:  # noqa: BLE001 - reported by the assertion below
            failures.append(exc)

    threads = [threading.Thread(target=open_it) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for book in opened:
        book.close()
    assert failures == [] and len(opened) == 8
    book = Ledger(path)
    assert book.db.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION
    book.close()


def test_watch_windows_are_recorded_and_looks_counted_per_release_and_host(tmp_path: Path) -> None:
    from specctl.ledger.records import WatchWindow

    book = Ledger(tmp_path / "ledger.db")
    with book.recording("w1", "watch", command="specctl watch p", hosts=["h0"]):
        pass

    def window(start: str, state: str, look: int, host: str = "h0") -> WatchWindow:
        return WatchWindow(
            "w1", host, "r1", "p", start, start, state, look, 3.1, 2.9, 3.3, 3.0, "counters", 12, None, {"why": state}
        )

    book.record_window(window("2026-12-03T10:00:00Z", "ok", 1))
    book.record_window(window("2026-12-03T10:05:00Z", "unknown", 0))
    book.record_window(window("2026-12-03T10:10:00Z", "degraded", 2))
    book.record_window(window("2026-12-03T10:10:00Z", "ok", 1, host="h1"))
    assert book.looks("r1", "h0") == 2 and book.looks("r1", "h1") == 1 and book.looks("r2", "h0") == 0
    kept = book.windows(release="r1", host="h0")
    assert [w.state for w in kept] == ["ok", "unknown", "degraded"] and kept[2].detail == {"why": "degraded"}
    assert len(book.windows(profile="p")) == 4
    book.close()
