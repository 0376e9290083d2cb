"""The ledger's SQLite file and how it fails: connections, the empty ledger a reading command sees
where no file exists yet, and sqlite3 and OS errors about the file translated into a LedgerError
that names the file and the cure (SQLite's own words kept)."""

from __future__ import annotations

import errno
import os
import shlex
import sqlite3
from pathlib import Path

from specctl.errors import LedgerError
from specctl.ledger.schema import MIGRATIONS, SCHEMA_VERSION

BUSY_TIMEOUT_S = 30.0  # how long a command waits for another one's write before it says the ledger is locked
# primary result codes (sqlite.org/rescode.html); an extended code keeps its primary in the low byte
PERM, BUSY, LOCKED, READONLY, IOERR, CORRUPT, FULL, CANTOPEN, NOTADB = 3, 5, 6, 8, 10, 11, 13, 14, 26
BUGS = (sqlite3.IntegrityError, sqlite3.ProgrammingError, sqlite3.InterfaceError, sqlite3.NotSupportedError)
OS_CODES = {
    errno.ENOSPC: FULL,
    errno.EDQUOT: FULL,
    errno.EROFS: READONLY,
    errno.EACCES: READONLY,
    errno.EPERM: READONLY,
}
COPIES = "the release directories on the hosts keep a copy of each run (runs/<id>.json)"
ELSEWHERE = "point --ledger or SPECCTL_LEDGER at a writable file"


def connect(target: str, *, uri: bool = False) -> sqlite3.Connection:
    # transactions are explicit; host threads share the connection under the ledger's lock
    return sqlite3.connect(target, timeout=BUSY_TIMEOUT_S, isolation_level=None, check_same_thread=False, uri=uri)


def empty_ledger() -> sqlite3.Connection:
    """What a reading command sees where no ledger file exists yet: the schema and no runs."""
    db = connect(":memory:")
    for script in MIGRATIONS:
        db.executescript(script)
    db.execute(f"PRAGMA user_version = {SCHEMA_VERSION}")
    db.execute("PRAGMA query_only = ON")
    return db


def primary(exc: sqlite3.Error) -> int:
    return (getattr(exc, "sqlite_errorcode", None) or 0) & 0xFF


def beside(path: Path, suffix: str) -> Path:
    return path.with_name(path.name + suffix)


def ledger_error(path: Path, exc: sqlite3.Error | OSError, doing: str) -> LedgerError:
    """What is wrong with the ledger file and how the user cures it, keeping SQLite's own words."""
    if isinstance(exc, OSError):
        code, said = OS_CODES.get(exc.errno or 0, -1), str(exc)
    else:
        code, said = primary(exc), f"{exc} [{getattr(exc, 'sqlite_errorname', 'sqlite')}]"
    cause, where, aside = (
        f"{said}, while {doing}",
        path.parent,
        f"mv {shlex.quote(str(path))} {shlex.quote(f'{path}.broken')}",
    )
    if code in (CORRUPT, NOTADB):
        return LedgerError(
            f"the ledger {path} is damaged or is not an SQLite file ({cause})",
            path=str(path),
            fix=f"move it aside ({aside}) and run again to start a new ledger; {COPIES}",
        )
    if code == FULL:
        return LedgerError(
            f"the disk holding the ledger {path} is full ({cause})",
            path=str(path),
            fix=f"free space on the filesystem of {where} (df -h {shlex.quote(str(where))}) and run again;"
            " a run left open is closed as killed when the ledger is next opened",
        )
    if code in (BUSY, LOCKED):
        return LedgerError(
            f"the ledger {path} is locked by another process ({cause})",
            path=str(path),
            fix="wait for the other specctl command to finish, then run again",
        )
    if code in (READONLY, PERM, CANTOPEN):
        problem, fix = _access_problem(path)
        return LedgerError(f"cannot use the ledger {path}: {problem} ({cause})", path=str(path), fix=fix)
    if code == -1:  # the directory could not be made: a file in the way, a broken link
        return LedgerError(
            f"cannot make the directory of the ledger {path} ({cause})",
            path=str(path),
            fix=f"make {where} a directory this user can write, or {ELSEWHERE}",
        )
    if code == IOERR:
        return LedgerError(
            f"reading or writing the ledger {path} failed ({cause})",
            path=str(path),
            fix=f"check the disk and filesystem of {where} and run again; if the file is damaged,"
            f" move it aside ({aside}): {COPIES}",
        )
    return LedgerError(
        f"the ledger {path} could not be used ({cause})",
        path=str(path),
        fix=f"if it is not a specctl ledger, {ELSEWHERE}; if it is damaged, move it aside ({aside}): {COPIES}",
    )


def _access_problem(path: Path) -> tuple[str, str]:
    """Why the file cannot be opened or written, as far as the filesystem says, and the cure."""
    where = path.parent
    try:
        if os.statvfs(where).f_flag & os.ST_RDONLY:
            return f"the filesystem holding {where} is mounted read-only", f"remount it read-write, or {ELSEWHERE}"
    except OSError:
        pass
    if os.access(path, os.F_OK) and not os.access(path, os.R_OK | os.W_OK):
        return (
            f"{path} is not readable and writable by this user",
            f"fix its permissions (chmod u+rw {shlex.quote(str(path))}), or {ELSEWHERE}",
        )
    wal, shm = beside(path, "-wal"), beside(path, "-shm")
    for side in (wal, shm):
        if os.access(side, os.F_OK) and not os.access(side, os.R_OK | os.W_OK):
            return (
                f"{side.name} beside it is not writable by this user (SQLite's WAL files: a reader in a writable"
                " directory leaves them, owned by that reader)",
                f"have their owner or root make {wal.name} and {shm.name} writable for you, or {ELSEWHERE}",
            )
    if not os.access(where, os.W_OK | os.X_OK):
        return (
            f"its directory {where} is not writable by this user "
            f"(SQLite keeps {path.name}-wal and {path.name}-shm there)",
            f"fix the directory's permissions, or {ELSEWHERE}",
        )
    return "it cannot be opened or written", f"check the permissions of {path} and {where}, or {ELSEWHERE}"


def unreadable_wal(path: Path, exc: sqlite3.Error) -> LedgerError:
    """A WAL ledger with changes still in its -wal file, where SQLite cannot open the -shm index it
    needs to read them: reading the main file alone would miss them."""
    wal, shm = beside(path, "-wal"), beside(path, "-shm")
    return LedgerError(
        f"the ledger {path} has changes in {wal.name} that SQLite reads only through {shm.name}, and"
        f" {shm.name} cannot be opened or created in {path.parent} ({exc}"
        f" [{getattr(exc, 'sqlite_errorname', 'sqlite')}], while opening it for reading)",
        path=str(path),
        fix=f"run the command as a user who can write {path.parent} (a command that writes the ledger also"
        f" folds {wal.name} into the main file), or copy {path.name} and {wal.name} into a writable"
        " directory and point --ledger at the copy",
    )


def newer_schema(path: Path, version: int) -> LedgerError:
    return LedgerError(
        f"{path} has ledger schema {version}; this specctl knows up to {SCHEMA_VERSION}",
        path=str(path),
        fix="upgrade specctl, or point --ledger at another file",
    )
