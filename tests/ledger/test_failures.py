"""The ledger file failing for real: garbage bytes, a full disk (a tiny tmpfs filled up) and a
read-only filesystem, each a LedgerError that names the file and the cure; `runs` exits 2."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

import pytest

from specctl.errors import LedgerError
from specctl.ledger.ledger import Ledger
from tests.ledger.conftest import fill, remount_read_only


def _broken(path: Path, readonly: bool) -> LedgerError:
    with pytest.raises(LedgerError) as raised:
        book = Ledger(path, readonly=readonly)
        try:
            book.runs()
        finally:
            book.close()
    return raised.value


@pytest.mark.parametrize("readonly", [False, True])
def test_a_file_of_garbage_is_named_with_the_way_out(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "l.db"
    path.write_bytes(b"not a ledger at all\n" * 300)
    error = _broken(path, readonly)
    assert error.path == str(path) and error.exit_code == 2
    assert f"the ledger {path} is damaged" in error.message and "file is not a database" in error.message
    assert f"mv {path} {path}.broken" in (error.fix or "") and "runs/<id>.json" in (error.fix or "")
    assert path.read_bytes() == b"not a ledger at all\n" * 300  # never rewritten


@pytest.mark.parametrize("readonly", [False, True])
def test_a_ledger_with_damaged_pages_is_named_too(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "l.db"
    book = Ledger(path)
    for i in range(40):
        book.record_host(book.begin(f"r{i}", "verify", command="c"), "h", facts={"pad": "x" * 500})
    book.close()
    data = bytearray(path.read_bytes())
    data[4096:] = b"\xff" * (len(data) - 4096)  # the header and schema page survive, every table page is noise
    path.write_bytes(bytes(data))
    error = _broken(path, readonly)
    assert "is damaged" in error.message and "malformed" in error.message and "mv " in (error.fix or "")


def test_runs_exits_2_naming_the_file(tmp_path: Path, cli: Any) -> None:
    path = tmp_path / "l.db"
    path.write_bytes(b"\x00garbage" * 512)
    result = cli("runs", "--ledger", str(path))
    assert result.code == 2 and result.stdout == ""
    flat = " ".join(result.stderr.split())
    assert (
        f"the ledger {path} is damaged" in flat
        and "file is not a database" in flat
        and f"mv {path} {path}.broken" in flat
    )
    as_json = cli("runs", "--ledger", str(path), "--json")
    assert as_json.code == 2
    error = as_json.json()["error"]
    assert error["type"] == "LedgerError" and error["path"] == str(path) and error["exit_code"] == 2


def test_a_bug_in_our_sql_stays_a_bug(tmp_path: Path) -> None:
    """A broken constraint is specctl's mistake, not the file's: it is not dressed as a LedgerError."""
    book = Ledger(tmp_path / "l.db")
    book.begin("r", "deploy", command="c")
    with pytest.raises(sqlite3.IntegrityError):
        book.begin("r", "deploy", command="c")
    with pytest.raises(sqlite3.IntegrityError):
        book.record_event("no-such-run", "h", "start", "began")
    book.close()


def test_a_directory_that_cannot_be_made(tmp_path: Path) -> None:
    (tmp_path / "file").write_text("")
    with pytest.raises(LedgerError, match="cannot make the directory") as raised:
        Ledger(tmp_path / "file" / "l.db")
    assert raised.value.path == str(tmp_path / "file" / "l.db")


# --- a full disk ---------------------------------------------------------------------------------
def test_a_full_disk_is_named_and_the_ledger_works_again_once_space_is_freed(tiny_disk: Path) -> None:
    path = tiny_disk / "l.db"
    book = Ledger(path)
    book.begin("r", "deploy", command="c")
    filler = fill(tiny_disk)
    with pytest.raises(LedgerError) as full:
        book.record_host("r", "h", facts={"blob": "x" * 300_000})
    assert full.value.path == str(path)
    assert (
        f"the disk holding the ledger {path} is full" in full.value.message
        and "database or disk is full" in full.value.message
    )
    assert "recording host h of run r" in full.value.message and f"df -h {tiny_disk}" in (full.value.fix or "")
    with pytest.raises(LedgerError, match="is full"):
        book.begin("r2", "deploy", command="c")
    assert [r.id for r in book.runs()] == ["r"] and book.get(
        "r"
    ).host_records == ()  # reading still works; nothing half-written
    filler.unlink()
    book.record_host("r", "h", facts={"blob": "small"})
    book.finish("r", "succeeded")
    assert book.get("r").status == "succeeded"
    book.close()


def test_a_run_that_cannot_be_closed_keeps_the_original_error(tiny_disk: Path) -> None:
    book = Ledger(tiny_disk / "l.db")
    with pytest.raises(RuntimeError, match="the deploy broke") as raised, book.recording("r", "deploy", command="c"):
        fill(tiny_disk)
        raise RuntimeError("the deploy broke")
    notes = " ".join(getattr(raised.value, "__notes__", []))
    assert "could not close run r as failed" in notes and "is full" in notes and "closes it as killed" in notes
    (tiny_disk / "filler").unlink()
    assert book.get("r").status == "running"  # left for the next opening after this process ends
    book.close()


def test_a_full_disk_inside_a_recorded_run_is_the_error_raised(tiny_disk: Path) -> None:
    book = Ledger(tiny_disk / "l.db")
    with pytest.raises(LedgerError, match="recording host h") as raised, book.recording("r", "deploy", command="c"):
        fill(tiny_disk)
        book.record_host("r", "h", facts={"blob": "x" * 300_000})
    assert any("could not close run r" in note for note in getattr(raised.value, "__notes__", []))
    (tiny_disk / "filler").unlink()
    book.close()


# --- a read-only filesystem (root ignores file modes; a read-only mount it cannot) ---------------
def _ledger_with_runs(path: Path, *ids: str) -> None:
    book = Ledger(path)
    for run_id in ids:
        book.begin(run_id, "verify", command="c")
        book.finish(run_id, "succeeded")
    book.close()


def test_writing_to_a_read_only_filesystem_is_named(tiny_disk: Path) -> None:
    path = tiny_disk / "l.db"
    _ledger_with_runs(path, "a")
    remount_read_only(tiny_disk)
    with pytest.raises(LedgerError) as raised:
        Ledger(path)
    assert (
        f"cannot use the ledger {path}: the filesystem holding {tiny_disk} is mounted read-only" in raised.value.message
    )
    assert "unable to open database file" in raised.value.message and "SPECCTL_LEDGER" in (raised.value.fix or "")


def test_runs_reads_a_ledger_on_a_read_only_filesystem(tiny_disk: Path, cli: Any) -> None:
    """What the read-only opener is for; `runs` uses it once runs_cmds opens `Ledger(path, readonly=True)`."""
    path = tiny_disk / "l.db"
    _ledger_with_runs(path, "a", "b")
    remount_read_only(tiny_disk)
    result = cli("runs", "--ledger", str(path), "--json")
    if result.code == 2:  # the writing opener: at least a LedgerError naming the file and the mount
        error = result.json()["error"]
        assert error["path"] == str(path) and "mounted read-only" in error["message"]
        pytest.xfail("runs_cmds._open still opens the ledger for writing")
    assert result.code == 0, result.stderr
    assert [r["id"] for r in result.json()["runs"]] == ["a", "b"]


@pytest.mark.parametrize("readonly", [False, True])
def test_another_programs_database_is_left_alone(tmp_path: Path, readonly: bool) -> None:
    path = tmp_path / "notes.db"
    db = sqlite3.connect(path)
    db.execute("CREATE TABLE notes (body TEXT)")
    db.commit()
    db.close()
    with pytest.raises(LedgerError, match="not a specctl ledger") as raised:
        Ledger(path, readonly=readonly)
    assert "SPECCTL_LEDGER" in (raised.value.fix or "")
    db = sqlite3.connect(path)
    assert [r[0] for r in db.execute("SELECT name FROM sqlite_master")] == ["notes"]
    db.close()
