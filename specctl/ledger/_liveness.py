"""Whether a process of this machine still exists: how the ledger tells a run left `running` by a
process that is gone (killed, power lost) from one still in progress."""

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
