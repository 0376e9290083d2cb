"""The ledger's schema: the kinds, statuses and events a run records, and the migrations that move a
ledger file forward (`PRAGMA user_version` is how many have run), never edited in place."""

from __future__ import annotations

KINDS = ("deploy", "verify", "baseline", "rollback", "unlock", "tune", "stage", "watch")
# unreachable: a verify that reached no server (nothing measured, no release record changed): not a
# verdict, so not `failed`. The column is plain TEXT: a new status needs no migration, and an older
# specctl reads it as the word it is.
STATUSES = ("running", "succeeded", "failed", "killed", "unreachable")
EVENTS = ("began", "ended", "failed", "undone", "undo-failed")

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
    # 3: the step boundaries of a run on each host, in the order they happened
    """
    CREATE TABLE run_events (
        run_id TEXT NOT NULL REFERENCES runs(id),
        seq INTEGER NOT NULL,
        host TEXT NOT NULL,
        stage TEXT NOT NULL,
        event TEXT NOT NULL,
        at TEXT NOT NULL,
        detail TEXT,
        PRIMARY KEY (run_id, seq)
    );
    """,
    # 4: a deploy's unit of work is a step (staging is fetching weights)
    """
    ALTER TABLE run_events RENAME COLUMN stage TO step;
    """,
    # 5: when the run's process started (with its pid: that very process, not a later one given its pid)
    """
    ALTER TABLE runs ADD COLUMN process_start TEXT;
    """,
    # 6: every window `watch` judged on a serving release: its verdict, and what was done about it
    """
    CREATE TABLE watch_windows (
        run_id TEXT NOT NULL REFERENCES runs(id),
        host TEXT NOT NULL,
        release TEXT NOT NULL,
        profile TEXT,
        started_at TEXT NOT NULL,
        ended_at TEXT NOT NULL,
        state TEXT NOT NULL,
        look INTEGER NOT NULL,
        estimate REAL,
        low REAL,
        high REAL,
        floor REAL,
        method TEXT,
        requests INTEGER,
        action TEXT,
        detail TEXT,
        PRIMARY KEY (run_id, host, started_at)
    );
    CREATE INDEX windows_by_release ON watch_windows(release, host, ended_at);
    CREATE INDEX windows_by_profile ON watch_windows(profile, ended_at);
    """,
)
SCHEMA_VERSION = len(MIGRATIONS)
# the oldest schema a reading command reads as it is: 3 names the events' step column `stage`, 3 and 4
# lack the runs' process start time (their runs are judged by pid alone), and before 6 nothing watched
READABLE_SCHEMA = 3
