"""The run ledger: local-first SQLite, one transaction per state change.

Every deploy, verify, baseline, rollback and unlock is a row in `runs`, opened as `running` and
closed as succeeded, failed, killed or unreachable (a verify that reached no server: it judged
nothing); what happened on each host is a row in `run_hosts`. The
schema is versioned with `PRAGMA user_version` and moved forward by `MIGRATIONS`, never edited in
place. A run left `running` by a process that no longer exists is closed as killed when the ledger
is next opened.

Reading commands open the ledger read-only (`Ledger(path, readonly=True)`): no migration, no
writes, and a missing file reads as an empty ledger. Every failure of the file itself (damaged,
read-only, disk full, locked, a schema this specctl cannot use) is a LedgerError that names the file
and the cure; sqlite3 errors that mean a bug in specctl's own SQL stay as they are.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sqlite3
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import astuple, replace
from pathlib import Path
from typing import Any

from specctl.cancel import Cancelled
from specctl.errors import InputError, LedgerError
from specctl.ledger._sqlite import (
    BUGS,
    BUSY,
    BUSY_TIMEOUT_S,
    CANTOPEN,
    ELSEWHERE,
    LOCKED,
    READONLY,
    beside,
    connect,
    empty_ledger,
    ledger_error,
    newer_schema,
    primary,
    unreadable_wal,
)
from specctl.ledger.records import HostRecord, Outcome, Run, StepEvent, WatchWindow, now
from specctl.ledger.schema import EVENTS, KINDS, MIGRATIONS, READABLE_SCHEMA, SCHEMA_VERSION, STATUSES
from specctl.processes import process_alive, start_time
from specctl.settings import data_dir


def ledger_path(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """--ledger, else $SPECCTL_LEDGER, else `<data dir>/ledger.db`."""
    env = os.environ if environ is None else environ
    chosen = explicit or env.get("SPECCTL_LEDGER")
    return Path(chosen) if chosen else data_dir(env) / "ledger.db"


def _loads(raw: str | None) -> Any:
    return json.loads(raw) if raw else None


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


class Ledger:
    """The ledger file, opened (and migrated) once per command; `readonly=True` for commands that
    only read it: no migration, no writes, and a missing file is an empty ledger."""

    def __init__(self, path: Path, *, readonly: bool = False) -> None:
        self.path = path
        self.readonly = readonly
        self._lock = threading.RLock()  # host threads share the connection, one statement group at a time
        self._step_column = "step"  # a schema-3 ledger read as it is names it `stage`
        self._process_start = "process_start"  # NULL in a schema-3 or -4 ledger read as it is
        self._watched = True  # a ledger before schema 6 read as it is holds no watch windows
        self.db = self._connect_for_reading() if readonly else self._connect()
        try:
            with self._guard("opening it"):
                self.db.row_factory = sqlite3.Row
                if readonly:
                    self._check_schema()
                    self._close_orphans_for_reading()
                else:
                    self._use_wal()
                    self.db.execute("PRAGMA foreign_keys=ON")
                    self._migrate()
                    self._close_orphans()
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self, doing: str = "writing it") -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: a state change is written whole or not at all. BEGIN or COMMIT
        failing is a LedgerError saying what was being done; what the block raises passes unchanged."""
        if self.readonly:
            raise RuntimeError(f"{self.path} was opened for reading")
        with self._lock:
            with self._guard(doing):
                self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
                with self._guard(doing):
                    self.db.execute("COMMIT")
            except BaseException as exc:
                self._rollback(exc)
                raise

    def _rollback(self, exc: BaseException) -> None:
        if not self.db.in_transaction:
            return  # SQLite already rolled back: it does on a full disk
        try:
            self.db.execute("ROLLBACK")
        except sqlite3.Error as failed:
            exc.add_note(f"the ledger {self.path} could not roll back either: {failed}")

    @contextmanager
    def _writing(self, doing: str) -> Iterator[sqlite3.Connection]:
        """A transaction whose every sqlite3 failure is a LedgerError saying what was being written."""
        with self._guard(doing), self.transaction(doing) as db:
            yield db

    @contextmanager
    def _guard(self, doing: str) -> Iterator[None]:
        """sqlite3 errors about the file as a LedgerError naming it; errors that mean a bug in our SQL
        (a broken constraint, a misused connection) stay as they are."""
        try:
            yield
        except BUGS:
            raise
        except sqlite3.Error as exc:
            raise ledger_error(self.path, exc, doing) from exc

    def _connect(self) -> sqlite3.Connection:
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise ledger_error(self.path, exc, f"creating {self.path.parent}") from exc
        with self._guard("opening it"):
            return connect(str(self.path))

    def _connect_for_reading(self) -> sqlite3.Connection:
        """`mode=ro`; `immutable=1` only where a WAL reader cannot get its -shm file (a read-only
        directory or filesystem) and no -wal file holds changes: then the main file is the whole ledger."""
        try:
            os.stat(self.path)
        except FileNotFoundError:
            return empty_ledger()
        except OSError as exc:
            raise ledger_error(self.path, exc, "opening it for reading") from exc
        uri = self.path.absolute().as_uri() + "?mode=ro"
        with self._guard("opening it for reading"):
            db = connect(uri, uri=True)
            try:
                db.execute("PRAGMA user_version").fetchone()  # the first read: where WAL needs its -shm file
                return db
            except sqlite3.Error as exc:
                db.close()
                if primary(exc) not in (READONLY, CANTOPEN):
                    raise
                wal = beside(self.path, "-wal")
                if wal.exists() and wal.stat().st_size > 0:
                    raise unreadable_wal(self.path, exc) from exc
            db = connect(uri + "&immutable=1", uri=True)
            try:
                db.execute("PRAGMA user_version").fetchone()
            except BaseException:
                db.close()
                raise
            return db

    def _use_wal(self) -> None:
        """WAL, so readers never wait for a writer. Switching a new file takes a lock SQLite does not
        wait for: commands creating the ledger at once retry here instead of failing."""
        deadline = time.monotonic() + BUSY_TIMEOUT_S
        while True:
            try:
                self.db.execute("PRAGMA journal_mode=WAL")
                return
            except sqlite3.OperationalError as exc:
                if primary(exc) not in (BUSY, LOCKED) or time.monotonic() > deadline:
                    raise
                time.sleep(0.01)

    def _check_schema(self) -> None:
        """A ledger opened for reading is read as it is: one at another schema is refused with the cure."""
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version == 0:
            self._refuse_foreign()
            self.db.close()  # an empty file (`touch`): nothing recorded yet
            self.db = empty_ledger()
            self.db.row_factory = sqlite3.Row
        elif version > SCHEMA_VERSION:
            raise newer_schema(self.path, version)
        elif READABLE_SCHEMA <= version < SCHEMA_VERSION:
            self._step_column = "stage" if version == 3 else "step"
            self._process_start = "NULL" if version < 5 else "process_start"
            self._watched = False
        elif version < SCHEMA_VERSION:
            raise LedgerError(
                f"{self.path} has ledger schema {version}; this specctl reads schema {SCHEMA_VERSION}"
                " and migrates a ledger only when a command writes to it",
                path=str(self.path),
                fix="run any command that writes the ledger (deploy, verify, baseline, rollback, unlock) once"
                " with this specctl, as a user who can write the file; reading commands work after that",
            )

    def _migrate(self) -> None:
        """One migration per transaction, the version read inside it: two commands opening a new
        ledger at once migrate it once. Up to date, it still writes (the version, unchanged): SQLite
        opens a read-only file without a word, and a writing command should stop here, before it
        touches a host."""
        while True:
            with self._writing("opening it for writing") as db:
                version = int(db.execute("PRAGMA user_version").fetchone()[0])
                if version > SCHEMA_VERSION:
                    raise newer_schema(self.path, version)
                if version == 0:
                    self._refuse_foreign()
                if version == SCHEMA_VERSION:
                    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
                    return
                for statement in filter(str.strip, MIGRATIONS[version].split(";")):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {version + 1}")

    def _refuse_foreign(self) -> None:
        """At schema 0, tables mean another program's database: a migration would write ours into it."""
        if self.db.execute("SELECT 1 FROM sqlite_master LIMIT 1").fetchall():
            raise LedgerError(
                f"{self.path} is an SQLite database but not a specctl ledger (it has tables and no ledger schema)",
                path=str(self.path),
                fix=ELSEWHERE[0].upper() + ELSEWHERE[1:],
            )

    def _close_orphans_for_reading(self) -> None:
        """A reading command must not show a run as running whose process is gone: where the file can be
        written, those runs are closed as killed first (in their own write, the schema left as it is);
        where it cannot (a read-only mount), they are shown as they were recorded."""
        try:
            gone = self._orphans()
        except LedgerError:
            return  # nothing recorded yet: no runs table
        if not gone or not os.access(self.path, os.W_OK) or not os.access(self.path.parent, os.W_OK):
            return
        note = json.dumps({"note": "its process was gone when the ledger was next read"})
        with self._guard("closing runs whose process is gone"):
            writer = connect(str(self.path))
            try:
                with writer:
                    writer.executemany(
                        "UPDATE runs SET status = 'killed', finished_at = ?, verdict = COALESCE(?, verdict) "
                        "WHERE id = ? AND status = 'running'",
                        [(now(), note, run_id) for run_id in gone],
                    )
            finally:
                writer.close()
        self.db.close()  # read again, with the runs closed
        self.db = self._connect_for_reading()
        self.db.row_factory = sqlite3.Row

    def _orphans(self) -> list[str]:
        """Runs left `running` by a process of this machine that is gone: killed (SIGKILL, power)."""
        rows = self._query(
            f"SELECT id, pid, {self._process_start} AS process_start FROM runs"
            " WHERE status = 'running' AND machine = ?",
            (socket.gethostname(),),
        )
        return [row["id"] for row in rows if not process_alive(int(row["pid"]), row["process_start"])]

    def _close_orphans(self) -> None:
        for run_id in self._orphans():
            self.finish(run_id, "killed", note="its process was gone when the ledger was next opened")

    # --- writing ---------------------------------------------------------------------------------
    def begin(
        self,
        run_id: str,
        kind: str,
        *,
        command: str,
        profile: Mapping[str, Any] | None = None,
        profile_sha256: str | None = None,
        hosts: Sequence[str] = (),
        reason: str | None = None,
        engine: str | None = None,
        engine_version: str | None = None,
        inputs: Mapping[str, Any] | None = None,
        parent: str | None = None,
        baseline_key: str | None = None,
    ) -> str:
        """Open a run as `running`; returns its id. The resolved profile is kept in `inputs`."""
        if kind not in KINDS:
            raise ValueError(f"unknown run kind {kind}")
        metadata = (profile or {}).get("metadata", {})
        with self._writing(f"opening run {run_id}") as db:
            db.execute(
                "INSERT INTO runs (id, kind, profile, profile_version, profile_sha256, hosts, command, user,"
                " machine, pid, process_start, reason, engine, engine_version, inputs, status, started_at, parent,"
                " baseline_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                (
                    run_id,
                    kind,
                    metadata.get("name"),
                    metadata.get("version"),
                    profile_sha256,
                    _dumps(list(hosts)),
                    command,
                    getpass.getuser(),
                    socket.gethostname(),
                    os.getpid(),
                    start_time(os.getpid()),
                    reason,
                    engine,
                    engine_version,
                    _dumps({**({"profile": dict(profile)} if profile else {}), **dict(inputs or {})}),
                    now(),
                    parent,
                    baseline_key,
                ),
            )
        return run_id

    def record_host(
        self,
        run_id: str,
        host: str,
        *,
        release: str | None = None,
        facts: Mapping[str, Any] | None = None,
        commands: Sequence[Sequence[str]] | None = None,
        measurements: Mapping[str, Any] | None = None,
        verdict: Mapping[str, Any] | None = None,
        passed: bool | None = None,
    ) -> None:
        """What the run did on one host (replaces an earlier record of the same host)."""
        with self._writing(f"recording host {host} of run {run_id}") as db:
            db.execute(
                "INSERT OR REPLACE INTO run_hosts"
                " (run_id, host, release, facts, commands, measurements, verdict, passed)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    run_id,
                    host,
                    release,
                    _dumps(facts),
                    _dumps([list(c) for c in commands] if commands else None),
                    _dumps(measurements),
                    _dumps(verdict),
                    None if passed is None else int(passed),
                ),
            )

    def record_event(self, run_id: str, host: str, step: str, event: str, detail: str | None = None) -> int:
        """A step boundary of a run on one host (`event` one of EVENTS); returns its number in the
        run, 1 up, taken in the same transaction so concurrent hosts never share one."""
        if event not in EVENTS:
            raise ValueError(f"a step event is one of {EVENTS}, not {event}")
        with self._writing(f"recording {step} {event} on {host} for run {run_id}") as db:
            seq = int(
                db.execute("SELECT COALESCE(MAX(seq), 0) + 1 FROM run_events WHERE run_id = ?", (run_id,)).fetchone()[0]
            )
            db.execute(
                "INSERT INTO run_events (run_id, seq, host, step, event, at, detail) VALUES (?, ?, ?, ?, ?, ?, ?)",
                (run_id, seq, host, step, event, now(), detail),
            )
        return seq

    def record_window(self, window: WatchWindow) -> None:
        """A window a watch run judged (replaces one recorded for the same run, host and start)."""
        with self._writing(f"recording a watch window of {window.host} for run {window.run_id}") as db:
            db.execute(
                "INSERT OR REPLACE INTO watch_windows (run_id, host, release, profile, started_at, ended_at, state,"
                " look, estimate, low, high, floor, method, requests, action, detail)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (*astuple(window)[:-1], _dumps(window.detail)),
            )

    def windows(
        self,
        *,
        profile: str | None = None,
        release: str | None = None,
        host: str | None = None,
        run_id: str | None = None,
    ) -> list[WatchWindow]:
        """Watch windows, oldest first, filtered."""
        if not self._watched:
            return []
        sql, args = "SELECT * FROM watch_windows WHERE 1=1", []
        for column, value in (("profile", profile), ("release", release), ("host", host), ("run_id", run_id)):
            if value:
                sql += f" AND {column} = ?"
                args.append(value)
        rows = self._query(sql + " ORDER BY ended_at, host", args)
        return [WatchWindow(**{**{k: r[k] for k in r.keys()}, "detail": _loads(r["detail"])}) for r in rows]

    def looks(self, release: str, host: str) -> int:
        """How many windows of this release on this host were judged (ok or degraded), over every watch run."""
        if not self._watched:
            return 0
        rows = self._query(
            "SELECT COUNT(*) FROM watch_windows WHERE release = ? AND host = ? AND look > 0", (release, host)
        )
        return int(rows[0][0])

    def finish(
        self, run_id: str, status: str, *, verdict: Mapping[str, Any] | None = None, note: str | None = None
    ) -> None:
        """Close a run; a run already closed keeps its first status (a kill after success changes nothing)."""
        if status not in STATUSES[1:]:
            raise ValueError(f"a run finishes as one of {STATUSES[1:]}, not {status}")
        body = dict(verdict or {})
        if note:
            body["note"] = note
        with self._writing(f"closing run {run_id} as {status}") as db:
            db.execute(
                "UPDATE runs SET status = ?, verdict = COALESCE(?, verdict), finished_at = ?"
                " WHERE id = ? AND status = 'running'",
                (status, _dumps(body) if body else None, now(), run_id),
            )

    @contextmanager
    def recording(self, run_id: str, kind: str, **fields: Any) -> Iterator[Outcome]:
        """Open a run for the block and close it by how the block ends: killed by a signal, failed
        by an exception, else with the status and verdict the block set."""
        self.begin(run_id, kind, **fields)
        outcome = Outcome()
        try:
            yield outcome
        except (Cancelled, KeyboardInterrupt) as exc:
            self._close_after(exc, run_id, "killed", verdict=outcome.verdict, note="stopped by a signal")
            raise
        except BaseException as exc:
            self._close_after(
                exc,
                run_id,
                "failed",
                verdict={
                    **(outcome.verdict or {}),
                    "passed": False,
                    "error": getattr(exc, "message", None) or repr(exc),
                },
            )
            raise
        self.finish(run_id, outcome.status, verdict=outcome.verdict)

    def _close_after(self, exc: BaseException, run_id: str, status: str, **how: Any) -> None:
        """Close the run an exception ended; when the ledger cannot (a full disk), say so on that
        exception instead of replacing it: the first failure is the one the user needs."""
        try:
            self.finish(run_id, status, **how)
        except Exception as failed:  # noqa: BLE001 - whatever it is, it must not mask `exc`
            exc.add_note(
                f"the ledger could not close run {run_id} as {status}: {getattr(failed, 'message', None) or failed};"
                " it stays `running` until the ledger is next opened after this process has ended,"
                " which closes it as killed"
            )

    # --- reading ---------------------------------------------------------------------------------
    def get(self, run_id: str) -> Run:
        """A run by id or unique id prefix, whole: with its hosts and its step events."""
        rows = self._query("SELECT * FROM runs WHERE id = ? OR id LIKE ? ORDER BY id", (run_id, run_id + "%"))
        exact = [r for r in rows if r["id"] == run_id]
        if not rows or (len(rows) > 1 and not exact):
            raise InputError(
                f"no run {run_id!r} in {self.path}" if not rows else f"{run_id!r} matches {len(rows)} runs",
                fix="`specctl runs` lists run ids",
            )
        run = self._run(exact[0] if exact else rows[0])
        return replace(run, events=tuple(self.events(run.id)))

    def events(self, run_id: str) -> list[StepEvent]:
        """The step boundaries of a run (exact id), in the order they were recorded."""
        rows = self._query(
            f"SELECT host, {self._step_column} AS step, event, at, detail"
            " FROM run_events WHERE run_id = ? ORDER BY seq",
            (run_id,),
        )
        return [StepEvent(r["host"], r["step"], r["event"], r["at"], r["detail"]) for r in rows]

    def runs(
        self, *, profile: str | None = None, host: str | None = None, kind: str | None = None, limit: int | None = None
    ) -> list[Run]:
        """Runs, oldest first, filtered (without their events: `get` or `events` reads those)."""
        sql, args = "SELECT * FROM runs WHERE 1=1", []
        if profile:
            sql += " AND profile = ?"
            args.append(profile)
        if kind:
            sql += " AND kind = ?"
            args.append(kind)
        if host:
            sql += " AND EXISTS (SELECT 1 FROM json_each(runs.hosts) WHERE value = ?)"
            args.append(host)
        sql += " ORDER BY started_at DESC, id DESC" + (f" LIMIT {int(limit)}" if limit else "")
        return [self._run(r) for r in reversed(self._query(sql, args))]

    def latest_baseline(self, key: str, host: str | None = None) -> Run | None:
        """The newest succeeded baseline with this key (same host first)."""
        rows = self._query(
            "SELECT * FROM runs WHERE kind = 'baseline' AND status = 'succeeded' AND baseline_key = ?"
            " ORDER BY started_at DESC",
            (key,),
        )
        runs = [self._run(r) for r in rows]
        same_host = [r for r in runs if host in r.hosts]
        chosen = same_host or runs
        return chosen[0] if chosen else None

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock, self._guard("reading it"):
            return self.db.execute(sql, args).fetchall()

    def _run(self, row: sqlite3.Row) -> Run:
        hosts = self._query("SELECT * FROM run_hosts WHERE run_id = ? ORDER BY host", (row["id"],))
        records = tuple(
            HostRecord(
                h["host"],
                h["release"],
                _loads(h["facts"]),
                _loads(h["commands"]),
                _loads(h["measurements"]),
                _loads(h["verdict"]),
                None if h["passed"] is None else bool(h["passed"]),
            )
            for h in hosts
        )
        return Run(
            row["id"],
            row["kind"],
            row["profile"],
            row["profile_version"],
            row["profile_sha256"],
            _loads(row["hosts"]) or [],
            row["command"],
            row["user"],
            row["machine"],
            row["pid"],
            row["reason"],
            row["engine"],
            row["engine_version"],
            _loads(row["inputs"]) or {},
            _loads(row["verdict"]),
            row["status"],
            row["started_at"],
            row["finished_at"],
            row["parent"],
            row["baseline_key"],
            records,
        )
