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
import secrets
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from specctl.errors import ConnectionLost, HostError
from specctl.facts.host import IDENTITY_LINE, IDENTITY_SH, Identity
from specctl.hosts.transport import Completed, Transport
from specctl.processes import process_alive, process_table, start_time
from specctl.release import whole

IDENTITY_FILE = "host-identity"  # in a state root: "machine-id hostname" of the machine it belongs to
ROOT_ID_FILE = "root-id"  # in a state root: its own random id, written once: who sees it, shares its lock
SEEN_FILE = "host-seen"  # in a host's root: "boot-id net-namespace inventory-name" of its last user
# First contact with a state root, then the lock, in one round trip. $1 lock, $2 owner, $3 root, $4 1 when
# the root is one machine's own (a Slurm cluster's is shared by design), $5 a fresh root id (used only if
# the root has none yet), $6 the inventory name. Every file is written whole (release/whole.py); an empty
# one a minute old, left by an interrupted write before writes were whole, is taken away first ("emptied
# AGE PATH"; a younger one: "young PATH", exit 11). Then the root's identity: written on first use, and a
# root that another machine wrote is refused (exit 9, printing its identity), a home shared by several
# hosts must not hold one state for all of them; its id ("identity ..." line); the last user of a host's
# root, and a root used under this very boot from other ports (network namespace) refused (exit 10,
# "ports NAME"), another inventory name with the same ports said ("seen NAME"). Then the lock: exit 0
# taken, 17 held (another writer's `ln` won); once taken, the root's last user is this one.
_CREATE = (
    whole.SH
    + IDENTITY_SH
    + r"""
lock=$1; owner=$2; root=$3; own=$4; fresh=$5; name=$6
emptied() {
  [ -f "$1" ] && [ ! -s "$1" ] || return 0
  age=$(( $(date +%s) - $(stat -c %Y "$1" 2>/dev/null || date +%s) ))
  [ "$age" -ge 60 ] || { printf 'young %s\n' "$1"; return 0; }
  mv "$1" "$1.empty.$$" 2>/dev/null || return 0
  if [ -s "$1.empty.$$" ]; then mv -n "$1.empty.$$" "$1"
  else rm -f "$1.empty.$$"; printf 'emptied %s %s\n' "$age" "$1"; fi
}
once() { [ -f "$1" ] && return 0; whole "$1" link; r=$?; [ $r -eq 0 ] || [ $r -eq 17 ]; }
made "$root" || exit 1
if [ "$own" = 1 ]; then
  emptied "$root/host-identity"
  printf '%s %s\n' "$mid" "$node" | once "$root/host-identity" || exit $?
  seen=$(head -n 1 "$root/host-identity" 2>/dev/null)
  [ -n "$seen" ] || exit 11
  [ "${seen%% *}" = "$mid" ] || { printf '%s\n' "$seen"; exit 9; }
fi
emptied "$root/root-id"
printf '%s\n' "$fresh" | once "$root/root-id" || exit $?
rid=$(head -n 1 "$root/root-id" 2>/dev/null); [ -n "$rid" ] || exit 11
"""
    + IDENTITY_LINE
    + r"""
if [ "$own" = 1 ]; then
  last=$(head -n 1 "$root/host-seen" 2>/dev/null)
  lboot=${last%% *}; rest=${last#* }; lnet=${rest%% *}; lname=${rest#* }
  if [ -n "$last" ] && [ "$lboot" = "$boot" ] && [ "$lnet" != "$netns" ]; then printf 'ports %s\n' "$lname"; exit 10; fi
  [ -n "$last" ] && [ "$lname" != "$name" ] && printf 'seen %s\n' "$lname"
fi
emptied "$lock"
printf '%s\n' "$owner" | whole "$lock" link || exit $?
if [ "$own" = 1 ] && [ "$last" != "$boot $netns $name" ]; then
  printf '%s %s %s\n' "$boot" "$netns" "$name" | whole "$root/host-seen" move || { r=$?; rm -f "$lock"; exit $r; }
fi
"""
)
# Take over a stale lock: move it aside (one rename: of two takers, one gets it), and replace it only
# if what was moved is the stale lock read before; anything else is put back. $1 lock, $2 the stale
# content, $3 the new owner.
_TAKE_OVER = (
    whole.SH + 'aside="$1.stale.$$"; mv "$1" "$aside" 2>/dev/null || exit 1; '
    'if [ "$(cat "$aside")" = "$2" ]; then rm -f "$aside"; printf "%s\\n" "$3" | whole "$1" link; '
    'else mv -n "$aside" "$1"; exit 1; fi'
)


@dataclass(frozen=True)
class Taken:
    """What taking a lock found: the stale holder taken over (None: the lock was free), the host's
    identity as its resources tell it (None where the host did not say), and what to say of either."""

    stale: dict[str, Any] | None
    identity: Identity | None
    notes: tuple[str, ...] = ()


# What this process has seen of state roots, per run: (run id, root id) -> (inventory name, identity), so
# a second inventory name reaching one root in one run is refused and not given the run's lock twice.
_roots: dict[tuple[str, str], tuple[str, Identity]] = {}
_hosts: dict[str, list[tuple[str, Identity]]] = {}  # run id -> every (inventory name, identity) seen

# The locks this process holds, (host, profile directory) -> run id. A lock that names this process
# with a run it no longer holds (a command run inside a program, which lost the host before it could
# release the lock) is provably stale: the run is over though the process lives on.
_holding: dict[tuple[str, str], str] = {}
_holding_guard = threading.Lock()


def owner(run_id: str, command: str, host: str | None = None) -> dict[str, Any]:
    """Who holds a lock: this process (its machine, process table, pid and start time), the run, and
    the inventory host it reached the root through (two names of one root share its one lock)."""
    return {
        "user": getpass.getuser(),
        "machine": socket.gethostname(),
        "table": process_table(),  # boot id and pid namespace: where the pid means this process
        "pid": os.getpid(),
        "started": start_time(os.getpid()),  # with the pid: this very process, not a later one given its pid
        "run_id": run_id,
        "command": command,
        "since": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        **({"host": host} if host is not None else {}),
    }


def acquire(transport: Transport, base: str, who: dict[str, Any], *, own_root: bool = True) -> dict[str, Any] | None:
    """`take`, for callers that say only who was taken over (the stale holder, else None)."""
    return take(transport, base, who, own_root=own_root).stale


def take(transport: Transport, base: str, who: dict[str, Any], *, own_root: bool = True) -> Taken:
    """Take the lock or raise naming its holder. A connection lost in the middle is resolved by
    reading the lock back: if it names us, the first attempt took it. A lock whose holder is provably
    gone is taken over, and returned for the caller to say so.

    The same round trip is the first contact with the state root: its id (written once), and the
    host as its resources tell it. With `own_root` (a host's root; a Slurm cluster's is shared by its
    login and compute nodes by design), the state root must be this machine's: one written by another
    machine is refused, and so is one used under this boot from other ports. A second inventory name
    reaching one root in one run is refused: the run holds its lock through the first."""
    who = {**who, "host": who.get("host") or transport.name}
    taken = _take(transport, base, who, own_root=own_root)
    with _holding_guard:
        _holding[(transport.name, base)] = str(who.get("run_id"))
    try:
        notes = _seen(transport, base, str(who.get("run_id")), taken.identity)
    except HostError:
        release(transport, base)  # taken a moment ago, by a name this run must not use
        raise
    return Taken(taken.stale, taken.identity, taken.notes + notes)


def _seen(transport: Transport, base: str, run_id: str, identity: Identity | None) -> tuple[str, ...]:
    """What this run has already seen of the host's resources under other inventory names: one root
    (refused), one machine-id under two boot ids (clones: said), one GPU (said)."""
    if identity is None:
        return ()
    name, root = transport.name, base.rsplit("/", 1)[0]
    notes = []
    with _holding_guard:
        first = _roots.setdefault((run_id, identity.root_id), (name, identity))
        others = [(n, i) for n, i in _hosts.setdefault(run_id, []) if n != name]
        if all(n != name for n, _ in _hosts[run_id]):
            _hosts[run_id].append((name, identity))
    for other, theirs in others:
        if theirs.machine_id == identity.machine_id and theirs.boot_id != identity.boot_id:
            notes.append(
                f"{name} and {other} share machine-id {identity.machine_id[:12]} under two boot ids: clones of one "
                "image whose /etc/machine-id was never regenerated (told apart by boot id)"
            )
        for gpu in sorted(set(theirs.gpus) & set(identity.gpus)):
            notes.append(f"GPU {gpu} is {other}'s too: their servers would share it")
    if first[0] != name:
        other, theirs = first
        clones = theirs.machine_id == identity.machine_id and theirs.boot_id != identity.boot_id
        if theirs.net_ns == identity.net_ns and theirs.process_table == identity.process_table:
            what = "one machine under two inventory names: this run changes it through " + other
        elif clones:
            what = f"two clones of one image (machine-id {identity.machine_id[:12]}, two boot ids) on one shared root"
        else:
            what = f"a root shared with {other} but not its ports (another network namespace) or processes"
        raise HostError(
            f"{name}: the state root {root} is {other}'s too (root id {identity.root_id[:12]}): {what}",
            host=name,
            fix=f"name each machine once in the inventory, or give {name} a `root:` of its own "
            f"(for example ~/.specctl/hosts/{name})",
        )
    return tuple(notes)


def _take(transport: Transport, base: str, who: dict[str, Any], *, own_root: bool) -> Taken:
    mine = json.dumps(who, sort_keys=True)
    root = base.rsplit("/", 1)[0]
    lock = f"{base}/lock"
    done = None
    try:
        done = transport.run(
            [
                "sh",
                "-c",
                _CREATE,
                "sh",
                lock,
                mine,
                root,
                "1" if own_root else "0",
                secrets.token_hex(16),
                transport.name,
            ],
            check=False,
        )
    except ConnectionLost:
        pass
    lines = done.stdout.splitlines() if done is not None else []
    identity = next((i for i in map(Identity.parse, lines) if i is not None), None)
    notes = tuple(_said(transport.name, root, line) for line in lines if line.startswith(("emptied ", "seen ")))
    if done is not None and done.rc == 0:
        return Taken(None, identity, notes)
    if done is not None:
        _refused(transport, done, root, lines)
    raw = transport.read(lock)
    held = _parsed(raw)
    if held == who:
        return Taken(None, identity, notes)
    if held is not None and raw is not None and holder_alive(held) is False:
        stale = raw.decode(errors="replace").rstrip("\n")
        over = transport.run(["sh", "-c", _TAKE_OVER, "sh", lock, stale, mine], check=False, retry=True)
        if over.rc == 0:
            return Taken(held, identity, notes)
        if (full := whole.no_space(transport, over)) is not None:
            raise full
        held = read(transport, base)  # another verb took it first
    if held is None:
        raise HostError(
            f"{transport.name}: cannot create the lock {lock}",
            host=transport.name,
            fix="check that the state directory is writable and its disk is not full",
        )
    if held.get("run_id") == who.get("run_id") and held.get("host") not in (None, who["host"]) and _this_process(held):
        raise HostError(
            f"{transport.name}: the state root {root} is {held['host']}'s too: this run holds its lock through "
            f"{held['host']} (one machine under two inventory names)",
            host=transport.name,
            fix=f"name each machine once in the inventory, or give {transport.name} a `root:` of its own",
        )
    raise HostError(
        f"{transport.name}: {base} is locked by {describe(held)}",
        host=transport.name,
        fix=f"wait for it to finish; if its process is gone: specctl unlock --hosts {transport.name} PROFILE",
    )


def _said(host: str, root: str, line: str) -> str:
    """A note of the first contact: an empty file taken away, a root last used under another name."""
    word, _, rest = line.partition(" ")
    if word == "emptied":
        age, _, path = rest.partition(" ")
        return (
            f"took over the empty {path.rsplit('/', 1)[-1]} file {path}, {age} s old: left by an interrupted write "
            "(a full disk?) before specctl wrote its files whole"
        )
    return f"{host} reaches the state root {root} that {rest} used last: the two names share its lock"


def _refused(transport: Transport, done: Completed, root: str, lines: list[str]) -> None:
    """Raise what the first contact's exit status says, if it refused (else return: the lock is held)."""
    name = transport.name
    if (full := whole.no_space(transport, done)) is not None:
        raise full
    if done.rc == 9:
        machine_id, _, hostname = (lines[-1] if lines else "").strip().partition(" ")
        raise HostError(
            f"{name}: the state directory {root} belongs to another machine ({hostname or '?'}, "
            f"machine-id {machine_id[:12]}): hosts that share a home directory need a state root each",
            host=name,
            fix=f"set `root:` for {name} in the inventory to a directory of its own "
            f"(for example ~/.specctl/hosts/{name}); {root}/{IDENTITY_FILE} names the machine it belongs to",
        )
    if done.rc == 10:
        other = next((line[6:] for line in lines if line.startswith("ports ")), "?")
        raise HostError(
            f"{name}: the state root {root} is used by {other} from other ports (another network namespace, "
            "under this same boot): a state root holds one host's releases",
            host=name,
            fix=f"give {name} a `root:` of its own in the inventory; if {other} no longer uses {root}, "
            f"remove {root}/{SEEN_FILE}",
        )
    if done.rc == 11:
        young = next((line[6:] for line in lines if line.startswith("young ")), f"{root}/{IDENTITY_FILE}")
        raise HostError(
            f"{name}: {young} is empty and less than a minute old: being written, or left by an interrupted write",
            host=name,
            fix="try again in a minute: an empty file a minute old is taken over",
        )
    if done.rc not in (0, whole.EXISTS):
        tail = (done.stderr or done.stdout).strip().splitlines()[-2:]
        raise HostError(
            f"{name}: cannot create the lock under {root} (exit {done.rc}): {' | '.join(tail)}",
            host=name,
            fix="check that the state directory is writable and its disk is not full",
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
        whole.put(transport, *last_write, then=["rm", "-f", f"{base}/lock"])


def holder_alive(held: dict[str, Any]) -> bool | None:
    """Whether the lock's holder still runs: known only for a holder in this process table (its boot
    id and pid namespace; a lock from before they were recorded: this hostname), None otherwise. A
    pid now used by a process that started after the holder's does not count as the holder."""
    pid, started = held.get("pid"), held.get("started")
    if not _here(held) or not isinstance(pid, int):
        return None
    if _this_process(held):  # is the run still on?
        with _holding_guard:
            return held.get("run_id") in _holding.values()
    return process_alive(pid, started if isinstance(started, str) else None)


def _here(held: dict[str, Any]) -> bool:
    """Whether the holder's pid names a process of this process table."""
    table, mine = held.get("table"), process_table()
    if isinstance(table, str) and mine is not None:
        return table == mine
    return bool(held.get("machine") == socket.gethostname())


def _this_process(held: dict[str, Any]) -> bool:
    """Whether the lock names this very process (its pid, and its start time when recorded)."""
    return _here(held) and held.get("pid") == os.getpid() and held.get("started") in (None, start_time(os.getpid()))


def describe(held: dict[str, Any] | None) -> str:
    if not held:
        return "nobody (the lock vanished)"
    if "unreadable" in held:
        if not held["unreadable"].strip():
            return "an empty lock file (an interrupted write; taken over once a minute old)"
        return f"an unreadable lock file ({held['unreadable']!r})"
    gone = "its run is over" if _this_process(held) else "its process is gone"
    state = {True: "its process is running", False: gone, None: "on another machine"}[holder_alive(held)]
    through = f" through {held['host']}" if held.get("host") else ""
    return (
        f"{held.get('user')}@{held.get('machine')} pid {held.get('pid')} since {held.get('since')} "
        f"(run {held.get('run_id')}: {held.get('command')}{through}; {state})"
    )
