"""The run ledger (DESIGN section 8): local-first SQLite, one transaction per state change.

Every deploy, verify, baseline, rollback and unlock is a row in `runs`, opened as `running` and
closed as succeeded, failed or killed; what happened on each host is a row in `run_hosts`. The
schema is versioned with `PRAGMA user_version` and moved forward by `MIGRATIONS`, never edited in
place. A run left `running` by a process that no longer exists is closed as killed when the ledger
is next opened.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import sqlite3
import threading
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from specctl.cancel import Cancelled
from specctl.errors import InputError
from specctl.settings import data_dir

KINDS = ("deploy", "verify", "baseline", "rollback", "unlock", "tune")
STATUSES = ("running", "succeeded", "failed", "killed")

MIGRATIONS: tuple[str, ...] = (
    # 1: runs and what each did on each host
    """
    CREATE TABLE runs (
        id TEXT PRIMARY KEY,
        kind TEXT NOT NULL,
        profile TEXT,
        profile_version INTEGER,
        profile_sha256 TEXT,
        hosts TEXT NOT NULL DEFAULT '[]',
        command TEXT NOT NULL,
        user TEXT NOT NULL,
        machine TEXT NOT NULL,
        pid INTEGER NOT NULL,
        reason TEXT,
        engine TEXT,
        engine_version TEXT,
        inputs TEXT NOT NULL DEFAULT '{}',
        verdict TEXT,
        status TEXT NOT NULL,
        started_at TEXT NOT NULL,
        finished_at TEXT
    );
    CREATE TABLE run_hosts (
        run_id TEXT NOT NULL REFERENCES runs(id),
        host TEXT NOT NULL,
        release TEXT,
        facts TEXT,
        commands TEXT,
        measurements TEXT,
        verdict TEXT,
        passed INTEGER,
        PRIMARY KEY (run_id, host)
    );
    """,
    # 2: the lookups `runs`, baselines and rollback make
    """
    CREATE INDEX runs_by_profile ON runs(profile, started_at);
    CREATE INDEX runs_by_kind ON runs(kind, status, started_at);
    ALTER TABLE runs ADD COLUMN parent TEXT REFERENCES runs(id);
    ALTER TABLE runs ADD COLUMN baseline_key TEXT;
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)


def ledger_path(explicit: str | None = None, environ: Mapping[str, str] | None = None) -> Path:
    """--ledger, else $SPECCTL_LEDGER, else `<data dir>/ledger.db`."""
    env = os.environ if environ is None else environ
    chosen = explicit or env.get("SPECCTL_LEDGER")
    return Path(chosen) if chosen else data_dir(env) / "ledger.db"


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Outcome:
    """What a recorded block sets before it ends normally."""

    status: str = "succeeded"
    verdict: dict[str, Any] | None = None


@dataclass(frozen=True)
class HostRecord:
    host: str
    release: str | None
    facts: dict[str, Any] | None
    commands: list[list[str]] | None
    measurements: dict[str, Any] | None
    verdict: dict[str, Any] | None
    passed: bool | None


@dataclass(frozen=True)
class Run:
    """One row of `runs` with its hosts, as data."""

    id: str
    kind: str
    profile: str | None
    profile_version: int | None
    profile_sha256: str | None
    hosts: list[str]
    command: str
    user: str
    machine: str
    pid: int
    reason: str | None
    engine: str | None
    engine_version: str | None
    inputs: dict[str, Any]
    verdict: dict[str, Any] | None
    status: str
    started_at: str
    finished_at: str | None
    parent: str | None
    baseline_key: str | None
    host_records: tuple[HostRecord, ...] = ()

    @property
    def passed(self) -> bool | None:
        """The verdict, or None when the run judged nothing (a deploy with --no-verify, an unlock)."""
        value = (self.verdict or {}).get("passed")
        return None if value is None else bool(value)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k != "host_records"}
        data["host_records"] = [h.__dict__ for h in self.host_records]
        return data


def _loads(raw: str | None) -> Any:
    return json.loads(raw) if raw else None


def _dumps(value: Any) -> str | None:
    return None if value is None else json.dumps(value, sort_keys=True, default=str)


class Ledger:
    """The ledger file, opened (and migrated) once per command."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        # transactions are explicit; host threads share the connection, one statement group at a time
        self.db = sqlite3.connect(path, timeout=30, isolation_level=None, check_same_thread=False)
        self._lock = threading.RLock()
        self.db.row_factory = sqlite3.Row
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        try:
            self._migrate()
            self._close_orphans()
        except BaseException:
            self.db.close()
            raise

    def close(self) -> None:
        self.db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT: a state change is written whole or not at all."""
        with self._lock:
            self.db.execute("BEGIN IMMEDIATE")
            try:
                yield self.db
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
            self.db.execute("COMMIT")

    def _migrate(self) -> None:
        version = int(self.db.execute("PRAGMA user_version").fetchone()[0])
        if version > SCHEMA_VERSION:
            raise InputError(f"{self.path} has ledger schema {version}; this specctl knows up to {SCHEMA_VERSION}",
                             fix="upgrade specctl, or point --ledger at another file")
        for number in range(version, SCHEMA_VERSION):
            with self.transaction() as db:
                for statement in filter(str.strip, MIGRATIONS[number].split(";")):
                    db.execute(statement)
                db.execute(f"PRAGMA user_version = {number + 1}")

    def _close_orphans(self) -> None:
        """Runs left `running` by a process of this machine that is gone were killed (SIGKILL, power)."""
        machine = socket.gethostname()
        rows = self.db.execute("SELECT id, pid FROM runs WHERE status = 'running' AND machine = ?", (machine,)).fetchall()
        for row in rows:
            if not _pid_alive(int(row["pid"])):
                self.finish(row["id"], "killed", note="its process was gone when the ledger was next opened")

    # --- writing ---------------------------------------------------------------------------------
    def begin(self, run_id: str, kind: str, *, command: str, profile: Mapping[str, Any] | None = None,
              profile_sha256: str | None = None, hosts: Sequence[str] = (), reason: str | None = None,
              engine: str | None = None, engine_version: str | None = None, inputs: Mapping[str, Any] | None = None,
              parent: str | None = None, baseline_key: str | None = None) -> str:
        """Open a run as `running`; returns its id. The resolved profile is kept in `inputs`."""
        if kind not in KINDS:
            raise ValueError(f"unknown run kind {kind}")
        metadata = (profile or {}).get("metadata", {})
        with self.transaction() as db:
            db.execute(
                "INSERT INTO runs (id, kind, profile, profile_version, profile_sha256, hosts, command, user, machine, pid,"
                " reason, engine, engine_version, inputs, status, started_at, parent, baseline_key)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, 'running', ?, ?, ?)",
                (run_id, kind, metadata.get("name"), metadata.get("version"), profile_sha256, _dumps(list(hosts)), command,
                 getpass.getuser(), socket.gethostname(), os.getpid(), reason, engine, engine_version,
                 _dumps({**({"profile": dict(profile)} if profile else {}), **dict(inputs or {})}), now(), parent, baseline_key))
        return run_id

    def record_host(self, run_id: str, host: str, *, release: str | None = None, facts: Mapping[str, Any] | None = None,
                    commands: Sequence[Sequence[str]] | None = None, measurements: Mapping[str, Any] | None = None,
                    verdict: Mapping[str, Any] | None = None, passed: bool | None = None) -> None:
        """What the run did on one host (replaces an earlier record of the same host)."""
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO run_hosts (run_id, host, release, facts, commands, measurements, verdict, passed)"
                " VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, host, release, _dumps(facts), _dumps([list(c) for c in commands] if commands else None),
                 _dumps(measurements), _dumps(verdict), None if passed is None else int(passed)))

    def finish(self, run_id: str, status: str, *, verdict: Mapping[str, Any] | None = None, note: str | None = None) -> None:
        """Close a run; a run already closed keeps its first status (a kill after success changes nothing)."""
        if status not in STATUSES[1:]:
            raise ValueError(f"a run finishes as one of {STATUSES[1:]}, not {status}")
        body = dict(verdict or {})
        if note:
            body["note"] = note
        with self.transaction() as db:
            db.execute("UPDATE runs SET status = ?, verdict = COALESCE(?, verdict), finished_at = ? WHERE id = ? AND status = 'running'",
                       (status, _dumps(body) if body else None, now(), run_id))

    @contextmanager
    def recording(self, run_id: str, kind: str, **fields: Any) -> Iterator[Outcome]:
        """Open a run for the block and close it by how the block ends: killed by a signal, failed
        by an exception, else with the status and verdict the block set."""
        self.begin(run_id, kind, **fields)
        outcome = Outcome()
        try:
            yield outcome
        except (Cancelled, KeyboardInterrupt):
            self.finish(run_id, "killed", verdict=outcome.verdict, note="stopped by a signal")
            raise
        except BaseException as exc:
            self.finish(run_id, "failed", verdict={**(outcome.verdict or {}), "passed": False,
                                                   "error": getattr(exc, "message", None) or repr(exc)})
            raise
        self.finish(run_id, outcome.status, verdict=outcome.verdict)

    # --- reading ---------------------------------------------------------------------------------
    def get(self, run_id: str) -> Run:
        """A run by id or unique id prefix."""
        rows = self._query("SELECT * FROM runs WHERE id = ? OR id LIKE ? ORDER BY id", (run_id, run_id + "%"))
        exact = [r for r in rows if r["id"] == run_id]
        if not rows or (len(rows) > 1 and not exact):
            raise InputError(f"no run {run_id!r} in {self.path}" if not rows else f"{run_id!r} matches {len(rows)} runs",
                             fix="`specctl runs` lists run ids")
        return self._run(exact[0] if exact else rows[0])

    def runs(self, *, profile: str | None = None, host: str | None = None, kind: str | None = None,
             limit: int | None = None) -> list[Run]:
        """Runs, oldest first, filtered."""
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
        rows = self._query("SELECT * FROM runs WHERE kind = 'baseline' AND status = 'succeeded' AND baseline_key = ?"
                           " ORDER BY started_at DESC", (key,))
        runs = [self._run(r) for r in rows]
        same_host = [r for r in runs if host in r.hosts]
        chosen = same_host or runs
        return chosen[0] if chosen else None

    def _query(self, sql: str, args: Sequence[Any] = ()) -> list[sqlite3.Row]:
        with self._lock:
            return self.db.execute(sql, args).fetchall()

    def _run(self, row: sqlite3.Row) -> Run:
        hosts = self._query("SELECT * FROM run_hosts WHERE run_id = ? ORDER BY host", (row["id"],))
        records = tuple(HostRecord(h["host"], h["release"], _loads(h["facts"]), _loads(h["commands"]), _loads(h["measurements"]),
                                   _loads(h["verdict"]), None if h["passed"] is None else bool(h["passed"])) for h in hosts)
        return Run(row["id"], row["kind"], row["profile"], row["profile_version"], row["profile_sha256"], _loads(row["hosts"]) or [],
                   row["command"], row["user"], row["machine"], row["pid"], row["reason"], row["engine"], row["engine_version"],
                   _loads(row["inputs"]) or {}, _loads(row["verdict"]), row["status"], row["started_at"], row["finished_at"],
                   row["parent"], row["baseline_key"], records)


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
