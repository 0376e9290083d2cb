"""Opening the ledger for reading (`Ledger(path, readonly=True)`) on real files: nothing is written,
a missing file is an empty ledger, and a WAL ledger is read where SQLite cannot make its -shm file
(a read-only mount; a chmod-444 file in a read-only directory, with file modes in force)."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from specctl.errors import InputError, LedgerError
from specctl.ledger.ledger import Ledger
from specctl.ledger.schema import MIGRATIONS, SCHEMA_VERSION
from tests.ledger.conftest import remount_read_only


def _ledger_with_runs(path: Path, *ids: str) -> None:
    book = Ledger(path)
    for run_id in ids:
        book.begin(run_id, "verify", command="c")
        book.record_event(run_id, "h", "verify", "began")
        book.finish(run_id, "succeeded")
    book.close()


def _files(directory: Path) -> list[str]:
    return sorted(p.name for p in directory.iterdir())


def test_a_missing_ledger_reads_as_empty_and_is_not_created(tmp_path: Path) -> None:
    path = tmp_path / "not-yet" / "l.db"
    book = Ledger(path, readonly=True)
    assert book.runs() == [] and book.latest_baseline("k") is None and book.events("r") == []
    with pytest.raises(InputError, match=f"no run 'r' in {path}"):
        book.get("r")
    with pytest.raises(RuntimeError, match="opened for reading"):
        book.begin("r", "deploy", command="c")
    book.close()
    assert not path.parent.exists()


def test_an_empty_file_reads_as_empty(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    path.touch()
    book = Ledger(path, readonly=True)
    assert book.runs() == []
    book.close()
    assert path.read_bytes() == b"" and _files(tmp_path) == ["l.db"]


def test_reading_writes_nothing_but_the_close_of_a_run_whose_process_is_gone(tmp_path: Path) -> None:
    """A reader never writes through its own connection; the one write a read makes is closing a run whose
    process is gone as killed, so that `runs` never shows it as running (nothing at all when nothing is)."""
    path = tmp_path / "l.db"
    _ledger_with_runs(path, "a")
    before = path.read_bytes()
    Ledger(path, readonly=True).close()
    assert path.read_bytes() == before
    writer = Ledger(path)
    writer.begin("orphan", "deploy", command="c")
    writer.db.execute("UPDATE runs SET pid = 999999999 WHERE id = 'orphan'")
    writer.close()
    book = Ledger(path, readonly=True)
    assert [(r.id, r.status) for r in book.runs()] == [("a", "succeeded"), ("orphan", "killed")]
    with pytest.raises(RuntimeError, match="opened for reading"):
        book.finish("a", "killed")
    book.close()


def test_an_older_ledger_is_not_migrated_by_a_reader(tmp_path: Path) -> None:
    path = tmp_path / "l.db"
    db = sqlite3.connect(path)
    db.executescript(MIGRATIONS[0] + MIGRATIONS[1] + "; PRAGMA user_version = 2;")
    db.close()
    with pytest.raises(LedgerError, match=f"schema 2; this specctl reads schema {SCHEMA_VERSION}") as raised:
        Ledger(path, readonly=True)
    assert "run any command that writes the ledger" in (raised.value.fix or "") and raised.value.path == str(path)
    db = sqlite3.connect(path)
    assert db.execute("PRAGMA user_version").fetchone()[0] == 2
    db.close()


def test_a_reader_beside_a_writer(tmp_path: Path) -> None:
    """WAL: a reader sees what is committed and never blocks the writer."""
    path = tmp_path / "l.db"
    writer = Ledger(path)
    writer.begin("a", "verify", command="c")
    reader = Ledger(path, readonly=True)
    assert [r.id for r in reader.runs()] == ["a"]
    with writer.transaction() as db:
        db.execute("UPDATE runs SET reason = 'mid-write' WHERE id = 'a'")
        assert reader.get("a").reason is None
    writer.begin("b", "verify", command="c")
    assert [r.id for r in reader.runs()] == ["a", "b"] and reader.get("a").reason == "mid-write"
    reader.close()
    writer.close()


# --- where SQLite cannot make the -shm file a WAL reader needs --------------------------------------
def test_a_clean_ledger_on_a_read_only_filesystem(tiny_disk: Path) -> None:
    path = tiny_disk / "l.db"
    _ledger_with_runs(path, "a", "b")
    assert _files(tiny_disk) == ["l.db"]  # the last writer folded the WAL back in and removed it
    remount_read_only(tiny_disk)
    book = Ledger(path, readonly=True)
    assert [r.id for r in book.runs()] == ["a", "b"] and [e.step for e in book.get("a").events or ()] == ["verify"]
    book.close()


def test_a_ledger_whose_writer_was_killed_on_a_read_only_filesystem(tiny_disk: Path) -> None:
    """A writer killed with SIGKILL leaves -wal and -shm; SQLite reads them without writing."""
    path = tiny_disk / "l.db"
    _ledger_with_runs(path, "a")
    _killed_writer(path, "b")
    assert _files(tiny_disk) == ["l.db", "l.db-shm", "l.db-wal"]
    remount_read_only(tiny_disk)
    book = Ledger(path, readonly=True)
    assert [(r.id, r.status) for r in book.runs()] == [("a", "succeeded"), ("b", "running")]  # b only in the -wal
    book.close()


def test_changes_only_in_the_wal_are_not_silently_skipped(tiny_disk: Path) -> None:
    path = tiny_disk / "l.db"
    _ledger_with_runs(path, "a")
    _killed_writer(path, "b")
    (tiny_disk / "l.db-shm").unlink()
    remount_read_only(tiny_disk)
    with pytest.raises(LedgerError, match="has changes in l.db-wal") as raised:
        Ledger(path, readonly=True)
    assert "copy l.db and l.db-wal" in (raised.value.fix or "") and raised.value.path == str(path)


def _killed_writer(path: Path, run_id: str) -> None:
    script = textwrap.dedent(f"""
        import os, pathlib
        from specctl.ledger.ledger import Ledger
        Ledger(pathlib.Path({str(path)!r})).begin({run_id!r}, "deploy", command="c")
        os._exit(0)  # no close: the WAL is not folded back in
    """)
    subprocess.run([sys.executable, "-c", script], check=True)


READ_UNDER_FILE_MODES = textwrap.dedent("""
    import json, pathlib, sys
    from specctl.errors import LedgerError
    from specctl.ledger.ledger import Ledger
    path = pathlib.Path(sys.argv[1])
    book = Ledger(path, readonly=True)
    seen = [r.id for r in book.runs()]
    book.close()
    try:
        Ledger(path).close()
        written = None
    except LedgerError as exc:
        written = {"exit_code": exc.exit_code, "message": exc.message, "fix": exc.fix, "path": exc.path}
    print(json.dumps({"runs": seen, "write": written}))
""")


@pytest.mark.parametrize("directory_mode", [0o555, 0o777], ids=["read-only-dir", "writable-dir"])
def test_a_chmod_444_ledger(tmp_path: Path, modes_apply: dict[str, Any], directory_mode: int) -> None:
    """Read in a child in which file modes apply (root ignores them): it reads; a writer is told why not."""
    directory = tmp_path / "ledger"
    directory.mkdir()
    path = directory / "l.db"
    _ledger_with_runs(path, "a", "b")
    path.chmod(0o444)
    directory.chmod(directory_mode)
    try:
        done = subprocess.run(
            [sys.executable, "-c", READ_UNDER_FILE_MODES, str(path)], capture_output=True, text=True, **modes_apply
        )
    finally:
        directory.chmod(0o755)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    assert seen["runs"] == ["a", "b"]
    assert seen["write"]["exit_code"] == 2 and seen["write"]["path"] == str(path)
    assert f"{path} is not readable and writable by this user" in seen["write"]["message"]
    assert f"chmod u+rw {path}" in seen["write"]["fix"]


WRITE_UNDER_FILE_MODES = textwrap.dedent("""
    import json, pathlib, sys
    from specctl.errors import LedgerError
    try:
        from specctl.ledger.ledger import Ledger
        Ledger(pathlib.Path(sys.argv[1])).close()
        print(json.dumps(None))
    except LedgerError as exc:
        print(json.dumps({"message": exc.message, "fix": exc.fix}))
""")


def test_wal_files_left_by_another_user_are_named(tmp_path: Path, modes_apply: dict[str, Any]) -> None:
    """A reader in a writable directory leaves -wal and -shm behind, owned by it; a writer that
    cannot write them is told which file is in the way."""
    directory = tmp_path / "ledger"
    directory.mkdir(mode=0o777)
    path = directory / "l.db"
    _ledger_with_runs(path, "a")
    reader = Ledger(path, readonly=True)
    reader.runs()
    reader.close()
    assert _files(directory) == ["l.db", "l.db-shm", "l.db-wal"]
    if not modes_apply:
        pytest.skip("needs root, to give the files to another user")
    for name in ("l.db-shm", "l.db-wal"):
        os.chown(directory / name, 65534, 65534)
        (directory / name).chmod(0o444)
    done = subprocess.run(
        [sys.executable, "-c", WRITE_UNDER_FILE_MODES, str(path)], capture_output=True, text=True, **modes_apply
    )
    assert done.returncode == 0, done.stderr
    refused = json.loads(done.stdout)
    assert refused is not None and "l.db-wal beside it is not writable by this user" in refused["message"]
    assert "make l.db-wal and l.db-shm writable" in refused["fix"]
