"""The `local` host: this machine, without SSH."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Mapping, Sequence

from specctl.hosts.transport import Completed, Transport

LOCAL = "local"


def _run(argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None, stdin: bytes | None) -> Completed:
    try:
        done = subprocess.run(list(argv), input=stdin, capture_output=True, timeout=timeout_s,
                              env={**os.environ, **env} if env else None)
    except subprocess.TimeoutExpired:
        return Completed(124, b"", f"timed out after {timeout_s:.0f} s")
    except FileNotFoundError as exc:
        return Completed(127, b"", str(exc))
    return Completed(done.returncode, done.stdout, done.stderr.decode(errors="replace"))


def local_transport() -> Transport:
    return Transport(LOCAL, "127.0.0.1", _run)


def process_alive(pid: int) -> bool:
    """Whether a process of this machine exists (one of another user counts)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
