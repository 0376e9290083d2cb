"""Processes of this machine: whether one still exists. Shared by the host lock (is its holder
here still running?) and the ledger (is a run left `running` still in progress?), neither of
which should depend on the other or on a host transport."""

from __future__ import annotations

import os


def process_alive(pid: int) -> bool:
    """Whether a process of this machine exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
