"""The per-profile host lock: one deploy at a time, with its owner written down."""

from __future__ import annotations

import getpass
import json
import os
import socket
import time
from typing import Any

from specctl.errors import HostError
from specctl.hosts.transport import Transport

# create the lock file only if absent (noclobber makes the redirection fail when it exists)
_CREATE = 'mkdir -p "${1%/*}" && set -C && printf "%s\\n" "$2" > "$1"'


def owner(run_id: str, command: str) -> dict[str, Any]:
    return {"user": getpass.getuser(), "machine": socket.gethostname(), "pid": os.getpid(), "run_id": run_id,
            "command": command, "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}


def acquire(transport: Transport, base: str, who: dict[str, Any]) -> None:
    done = transport.run(["sh", "-c", _CREATE, "sh", f"{base}/lock", json.dumps(who, sort_keys=True)], check=False)
    if done.rc != 0:
        held = read(transport, base)
        raise HostError(f"{transport.name}: {base} is locked by {describe(held)}", host=transport.name,
                        fix=f"wait for that deploy, or if it is dead: specctl unlock --host {transport.name} PROFILE")


def read(transport: Transport, base: str) -> dict[str, Any] | None:
    raw = transport.read(f"{base}/lock")
    if raw is None:
        return None
    try:
        data: dict[str, Any] = json.loads(raw)
        return data
    except ValueError:
        return {"unreadable": raw.decode(errors="replace")[:200]}


def release(transport: Transport, base: str) -> None:
    transport.run(["rm", "-f", f"{base}/lock"], check=False)


def describe(held: dict[str, Any] | None) -> str:
    if not held:
        return "nobody (the lock vanished)"
    return (f"{held.get('user')}@{held.get('machine')} pid {held.get('pid')} since {held.get('since')} "
            f"(run {held.get('run_id')}: {held.get('command')})")
