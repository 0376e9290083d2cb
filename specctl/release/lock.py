"""The per-profile host lock: one verb that changes a host at a time, with its owner written down.

Every verb that changes a host (deploy, rollback, baseline, verify, stop) holds it for its whole
length; `unlock` removes it only when its holder is gone, or when told to with `--force`.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from typing import Any

from specctl.errors import ConnectionLost, HostError
from specctl.hosts.transport import Transport
from specctl.processes import process_alive

# create the lock file only if absent (noclobber makes the redirection fail when it exists)
_CREATE = 'mkdir -p "${1%/*}" && set -C && printf "%s\\n" "$2" > "$1"'


def owner(run_id: str, command: str) -> dict[str, Any]:
    return {
        "user": getpass.getuser(),
        "machine": socket.gethostname(),
        "pid": os.getpid(),
        "run_id": run_id,
        "command": command,
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def acquire(transport: Transport, base: str, who: dict[str, Any]) -> None:
    """Take the lock or raise naming its holder. A connection lost in the middle is resolved by
    reading the lock back: if it names us, the first attempt took it."""
    try:
        done = transport.run(["sh", "-c", _CREATE, "sh", f"{base}/lock", json.dumps(who, sort_keys=True)], check=False)
        taken = done.rc == 0
    except ConnectionLost:
        taken = False
    if taken:
        return
    held = read(transport, base)
    if held == who:
        return
    if held is None:
        raise HostError(
            f"{transport.name}: cannot create the lock {base}/lock",
            host=transport.name,
            fix="check that the state directory is writable and its disk is not full",
        )
    raise HostError(
        f"{transport.name}: {base} is locked by {describe(held)}",
        host=transport.name,
        fix=f"wait for it to finish; if its process is gone: specctl unlock --hosts {transport.name} PROFILE",
    )


def read(transport: Transport, base: str) -> dict[str, Any] | None:
    raw = transport.read(f"{base}/lock")
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return {"unreadable": raw.decode(errors="replace")[:200]}
    return data if isinstance(data, dict) else {"unreadable": raw.decode(errors="replace")[:200]}


def release(transport: Transport, base: str, *, last_write: tuple[str, bytes] | None = None) -> None:
    """Remove the lock; with `last_write` (path, bytes), write that file first in the same round trip."""
    if last_write is None:
        transport.run(["rm", "-f", f"{base}/lock"], check=False, retry=True)
    else:
        transport.put(*last_write, then=["rm", "-f", f"{base}/lock"])


def holder_alive(held: dict[str, Any]) -> bool | None:
    """Whether the lock's holder still runs: known only for a holder on this machine (None otherwise)."""
    pid = held.get("pid")
    if held.get("machine") != socket.gethostname() or not isinstance(pid, int):
        return None
    return process_alive(pid)


def describe(held: dict[str, Any] | None) -> str:
    if not held:
        return "nobody (the lock vanished)"
    if "unreadable" in held:
        return f"an unreadable lock file ({held['unreadable']!r})"
    state = {True: "its process is running", False: "its process is gone", None: "on another machine"}[
        holder_alive(held)
    ]
    return (
        f"{held.get('user')}@{held.get('machine')} pid {held.get('pid')} since {held.get('since')} "
        f"(run {held.get('run_id')}: {held.get('command')}; {state})"
    )
