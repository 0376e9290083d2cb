"""Processes of this machine: whether one still exists. Shared by the host lock (is its holder
here still running?) and the ledger (is a run left `running` still in progress?), neither of
which should depend on the other or on a host transport. A host's processes are read in its own
shell, with the same meanings: facts/host.py's PROCESS_TABLE_SH (`process_table`) and PROCESS_SH
(`start_time`, `process_alive`)."""

from __future__ import annotations

import os
from pathlib import Path


def process_alive(pid: int, started: str | None = None) -> bool:
    """Whether a process of this machine exists (one of another user counts); with `started` (its
    start time, as `start_time` gave it), whether that very process does and not a later one that
    was given the same pid."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return started is None or start_time(pid) in (None, started)


def start_time(pid: int) -> str | None:
    """When a process started, in clock ticks since boot (/proc/PID/stat's 22nd field); None where
    /proc cannot tell (not Linux, or the process is gone)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text(encoding="ascii", errors="replace")
    except OSError:
        return None
    fields = stat.rsplit(") ", 1)[-1].split()
    return fields[19] if len(fields) > 19 else None


def process_table() -> str | None:
    """The process table this process lives in: the boot id and the pid namespace (a pid means the
    same process only under both; a hostname proves nothing: containers and clones share one). None
    where /proc cannot tell."""
    try:
        boot = Path("/proc/sys/kernel/random/boot_id").read_text(encoding="ascii").strip()
        return f"{boot}/{os.readlink('/proc/self/ns/pid')}"
    except OSError:
        return None
