"""The per-profile host lock: one verb that changes a host at a time, with its owner written down.

Every verb that changes a host (deploy, rollback, baseline, verify, stop) holds it for its whole
length; `unlock` removes it only when its holder is gone, or when told to with `--force`. A lock
whose holder is provably gone (a process of this machine that no longer runs: its pid is absent, or
belongs to a process started later; or a run of this very process that is over) is taken over by the
next verb, which says so. Taking the lock is also where a host's state root is proven to be that
machine's own (`host-identity`): the first write of every verb that changes a host.
"""

from __future__ import annotations

import getpass
import json
import os
import socket
import threading
import time
from typing import Any

from specctl.errors import ConnectionLost, HostError
from specctl.hosts.transport import Transport
from specctl.processes import process_alive, start_time

IDENTITY_FILE = "host-identity"  # in a state root: "machine-id hostname" of the machine it belongs to
# Create the lock file only if absent (noclobber makes the redirection fail when it exists). With $3
# (a host's own state root), first the root's identity: written on first use, and a root that another
# machine wrote is refused (exit 9, printing its identity) before anything else is written: a home
# directory shared by several hosts must not hold one state for all of them. $1 lock, $2 owner.
_CREATE = r"""
if [ -n "${3:-}" ]; then
  id=$(cat /etc/machine-id 2>/dev/null); me="${id:-$(uname -n)} $(uname -n)"
  mkdir -p "$3" || exit 1
  [ -f "$3/host-identity" ] || (set -C; printf '%s\n' "$me" >"$3/host-identity") 2>/dev/null
  seen=$(head -n 1 "$3/host-identity" 2>/dev/null)
  [ "${seen%% *}" = "${me%% *}" ] || { printf '%s\n' "$seen"; exit 9; }
fi
mkdir -p "${1%/*}" && set -C && printf "%s\n" "$2" > "$1"
"""
# Take over a stale lock: move it aside (one rename: of two takers, one gets it), and replace it only
# if what was moved is the stale lock read before; anything else is put back. $1 lock, $2 the stale
# content, $3 the new owner.
_TAKE_OVER = (
    'aside="$1.stale.$$"; mv "$1" "$aside" 2>/dev/null || exit 1; '
    'if [ "$(cat "$aside")" = "$2" ]; then rm -f "$aside"; set -C; printf "%s\\n" "$3" > "$1"; '
    'else mv -n "$aside" "$1"; exit 1; fi'
)


# The locks this process holds, (host, profile directory) -> run id. A lock that names this process
# with a run it no longer holds (a command run inside a program, which lost the host before it could
# release the lock) is provably stale: the run is over though the process lives on.
_holding: dict[tuple[str, str], str] = {}
_holding_guard = threading.Lock()


def owner(run_id: str, command: str) -> dict[str, Any]:
    return {
        "user": getpass.getuser(),
        "machine": socket.gethostname(),
        "pid": os.getpid(),
        "started": start_time(os.getpid()),  # with the pid: this very process, not a later one given its pid
        "run_id": run_id,
        "command": command,
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


def acquire(transport: Transport, base: str, who: dict[str, Any], *, own_root: bool = True) -> dict[str, Any] | None:
    """Take the lock or raise naming its holder. A connection lost in the middle is resolved by
    reading the lock back: if it names us, the first attempt took it. A lock whose holder is provably
    gone is taken over: the stale holder is returned, for the caller to say so (else None).

    With `own_root` (a host's root; a Slurm cluster's is shared by its login and compute nodes by
    design), the state root must be this machine's: one written by another machine is refused."""
    stale = _acquire(transport, base, who, own_root=own_root)
    with _holding_guard:
        _holding[(transport.name, base)] = str(who.get("run_id"))
    return stale


def _acquire(transport: Transport, base: str, who: dict[str, Any], *, own_root: bool) -> dict[str, Any] | None:
    mine = json.dumps(who, sort_keys=True)
    root = base.rsplit("/", 1)[0]
    done = None
    try:
        done = transport.run(
            ["sh", "-c", _CREATE, "sh", f"{base}/lock", mine, *([root] if own_root else [])], check=False
        )
        taken = done.rc == 0
    except ConnectionLost:
        taken = False
    if taken:
        return None
    if done is not None and done.rc == 9:
        machine_id, _, hostname = done.stdout.strip().partition(" ")
        raise HostError(
            f"{transport.name}: the state directory {root} belongs to another machine ({hostname or '?'}, "
            f"machine-id {machine_id[:12]}): hosts that share a home directory need a state root each",
            host=transport.name,
            fix=f"set `root:` for {transport.name} in the inventory to a directory of its own "
            f"(for example ~/.specctl/hosts/{transport.name}); {root}/{IDENTITY_FILE} names the machine it belongs to",
        )
    raw = transport.read(f"{base}/lock")
    held = _parsed(raw)
    if held == who:
        return None
    if held is not None and raw is not None and holder_alive(held) is False:
        stale = raw.decode(errors="replace").rstrip("\n")
        if transport.run(["sh", "-c", _TAKE_OVER, "sh", f"{base}/lock", stale, mine], check=False, retry=True).rc == 0:
            return held
        held = read(transport, base)  # another verb took it first
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
    return _parsed(transport.read(f"{base}/lock"))


def _parsed(raw: bytes | None) -> dict[str, Any] | None:
    if raw is None:
        return None
    try:
        data = json.loads(raw)
    except ValueError:
        return {"unreadable": raw.decode(errors="replace")[:200]}
    return data if isinstance(data, dict) else {"unreadable": raw.decode(errors="replace")[:200]}


def release(transport: Transport, base: str, *, last_write: tuple[str, bytes] | None = None) -> None:
    """Remove the lock; with `last_write` (path, bytes), write that file first in the same round trip.
    Whether or not the host answers, this process no longer holds it (its run is over)."""
    with _holding_guard:
        _holding.pop((transport.name, base), None)
    if last_write is None:
        transport.run(["rm", "-f", f"{base}/lock"], check=False, retry=True)
    else:
        transport.put(*last_write, then=["rm", "-f", f"{base}/lock"])


def holder_alive(held: dict[str, Any]) -> bool | None:
    """Whether the lock's holder still runs: known only for a holder on this machine (None otherwise).
    A pid now used by a process that started after the holder's does not count as the holder."""
    pid, started = held.get("pid"), held.get("started")
    if held.get("machine") != socket.gethostname() or not isinstance(pid, int):
        return None
    if _this_process(held):  # is the run still on?
        with _holding_guard:
            return held.get("run_id") in _holding.values()
    return process_alive(pid, started if isinstance(started, str) else None)


def _this_process(held: dict[str, Any]) -> bool:
    """Whether the lock names this very process (its pid, and its start time when recorded)."""
    return (
        held.get("machine") == socket.gethostname()
        and held.get("pid") == os.getpid()
        and held.get("started") in (None, start_time(os.getpid()))
    )


def describe(held: dict[str, Any] | None) -> str:
    if not held:
        return "nobody (the lock vanished)"
    if "unreadable" in held:
        return f"an unreadable lock file ({held['unreadable']!r})"
    gone = "its run is over" if _this_process(held) else "its process is gone"
    state = {True: "its process is running", False: gone, None: "on another machine"}[holder_alive(held)]
    return (
        f"{held.get('user')}@{held.get('machine')} pid {held.get('pid')} since {held.get('since')} "
        f"(run {held.get('run_id')}: {held.get('command')}; {state})"
    )
