"""The per-profile host lock: one verb that changes a host at a time, with its owner written down.

Every verb that changes a host (deploy, rollback, baseline, verify, stop) holds it for its whole
length; `unlock` removes it only when its holder is gone, or when told to with `--force`. A lock
whose holder is provably gone (a process of this very process table, boot id and pid namespace,
that no longer runs: its pid is absent, or belongs to a process started later; or a run of this very
process that is over) is taken over by the next verb, which says so. Taking the lock is also where a
host's state root is proven to be that host's own: the first write of every verb that changes a host.

Who may use a host's root (a Slurm cluster's is shared by design), judged by what the root keeps:
- `host-identity`: the machine-id that wrote it. Another machine-id is another machine on a shared
  home: refused.
- `host-seen`: one line, "BOOT NETNS SINCE NAME": the boot id, network namespace (ports) and inventory
  name of the root's last user, and when that boot first wrote it (its epoch seconds).
  - Same boot, another network namespace, ANOTHER name: two hosts of one kernel with their own ports
    (the sshd lab, containers): one root would be one `current` for two servers: refused.
  - Same boot, another network namespace, the SAME name: that host restarted (a container's new
    namespace): said, and the root is taken.
  - Another boot id (the machine-id is the same: host-identity holds): a reboot, or a clone of one
    image whose /etc/machine-id was never regenerated. A reboot ends the old boot before the new one
    begins, so the old boot wrote nothing after this boot began; a clone runs beside it. The line's
    SINCE at or after this boot's start (/proc/stat's btime) is a write by a live other boot: a
    clone, refused. Earlier: a reboot, and the line is this boot's from now on. (A clone that last
    wrote before this boot began is taken for a reboot: the first of the two to see the other's
    later write refuses. Clocks are the two machines' own: NTP-synced clones are told apart.)
Within one command, what the hosts' identities share under other names (one machine-id under two
boot ids, one GPU) is said (`Seen`, one per command); two names of one root in one run are refused
by the lock itself: it names the inventory host that holds it.
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
SEEN_FILE = "host-seen"  # in a host's root: "boot-id net-namespace since inventory-name" of its last user
# First contact with a state root, then the lock, in one round trip. $1 lock, $2 owner, $3 root, $4 1 when
# the root is one machine's own (a Slurm cluster's is shared by design), $5 a fresh root id (used only if
# the root has none yet), $6 the inventory name, $7 and $8 the names of IDENTITY_FILE and ROOT_ID_FILE,
# $9 SEEN_FILE. Every file is written whole (release/whole.py); an empty one a minute old, left by an
# interrupted write before writes were whole, is taken away first ("emptied AGE PATH"; a younger one:
# "young PATH", exit 11). Then the root's identity: written on first use, and a root that another
# machine wrote is refused (exit 9, printing its identity); its id ("identity ..." line); then the
# root's last user (the module's rules): another name from other ports under this boot refused (exit
# 10, "ports NAME"), the same name from new ports said ("restarted NAME"), another boot that wrote
# after this one began refused (exit 12, "clone BOOT SINCE NAME"), another inventory name said ("seen
# NAME"). Then the lock: exit 0 taken, 17 held (another writer's `ln` won); once taken, the root's
# last user is this one.
_CREATE = (
    whole.SH
    + IDENTITY_SH
    + r"""
lock=$1; owner=$2; root=$3; own=$4; fresh=$5; name=$6; idf=$root/$7; ridf=$root/$8; seenf=$root/$9
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
  emptied "$idf"
  printf '%s %s\n' "$mid" "$node" | once "$idf" || exit $?
  seen=$(head -n 1 "$idf" 2>/dev/null)
  [ -n "$seen" ] || exit 11
  [ "${seen%% *}" = "$mid" ] || { printf '%s\n' "$seen"; exit 9; }
fi
emptied "$ridf"
printf '%s\n' "$fresh" | once "$ridf" || exit $?
rid=$(head -n 1 "$ridf" 2>/dev/null); [ -n "$rid" ] || exit 11
"""
    + IDENTITY_LINE
    + r"""
now=$(date +%s); mine=""
if [ "$own" = 1 ]; then
  began=$(awk '$1 == "btime" { print $2 }' /proc/stat 2>/dev/null); began=${began:-$now}
  last=$(head -n 1 "$seenf" 2>/dev/null); lboot=${last%% *}; rest=${last#* }; lnet=${rest%% *}; rest=${rest#* }
  lat=${rest%% *}; lname=${rest#* }
  case $lat in ''|*[!0-9]*) lat=0; lname=$rest;; esac  # a line from before SINCE was kept: "BOOT NETNS NAME"
  if [ -z "$last" ]; then :
  elif [ "$lboot" = "$boot" ]; then
    if [ "$lnet" != "$netns" ]; then
      [ "$lname" = "$name" ] || { printf 'ports %s\n' "$lname"; exit 10; }
      printf 'restarted %s\n' "$lname"
    fi
    [ "$lname" = "$name" ] || printf 'seen %s\n' "$lname"
  elif [ "$lat" -ge "$began" ]; then printf 'clone %s %s %s\n' "$lboot" "$lat" "$lname"; exit 12
  else
    [ "$lname" = "$name" ] || printf 'seen %s\n' "$lname"
  fi
  since=$now; [ "$lboot" = "$boot" ] && [ "$lat" -gt 0 ] && since=$lat  # a boot's first write: alive since
  mine="$boot $netns $since $name"
fi
emptied "$lock"
printf '%s\n' "$owner" | whole "$lock" link || exit $?
if [ -n "$mine" ] && [ "$last" != "$mine" ]; then
  printf '%s\n' "$mine" | whole "$seenf" move || { r=$?; rm -f "$lock"; exit $r; }
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


# The locks this process holds, (host, profile directory) -> run id. A lock that names this process
# with a run it no longer holds (a command run inside a program, which lost the host before it could
# release the lock) is provably stale: the run is over though the process lives on.
_holding: dict[tuple[str, str], str] = {}
# (host, profile directory, run id) of the takes under way: such a run is live though it holds nothing yet
_taking: set[tuple[str, str, str]] = set()
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


class Seen:
    """What one command has seen of its hosts' identities, under each inventory name: so that what two
    names share (one machine-id under two boot ids, one GPU) is said. One per command (flows' Context),
    never kept past it. It only says: a refusal rests on what the host holds (the lock names the
    inventory host that holds it; host-seen, the root's last user)."""

    def __init__(self) -> None:
        self._hosts: dict[str, Identity] = {}
        self._guard = threading.Lock()

    def add(self, name: str, identity: Identity | None) -> tuple[str, ...]:
        """Record `name`'s identity; what it shares with the names seen before."""
        if identity is None:
            return ()
        with self._guard:
            others = [(n, i) for n, i in self._hosts.items() if n != name]
            self._hosts.setdefault(name, identity)
        notes = []
        for other, theirs in others:
            if theirs.machine_id == identity.machine_id and theirs.boot_id != identity.boot_id:
                notes.append(
                    f"{name} and {other} share machine-id {identity.machine_id[:12]} under two boot ids: clones of "
                    "one image whose /etc/machine-id was never regenerated (told apart by boot id)"
                )
            for gpu in sorted(set(theirs.gpus) & set(identity.gpus)):
                notes.append(f"GPU {gpu} is {other}'s too: their servers would share it")
        return tuple(notes)


def said(taken: Taken) -> tuple[str, ...]:
    """Everything a take says: its notes, then the stale holder it took over."""
    return taken.notes + ((f"took over the lock of {describe(taken.stale)}",) if taken.stale is not None else ())


def take(
    transport: Transport, base: str, who: dict[str, Any], *, own_root: bool = True, seen: Seen | None = None
) -> Taken:
    """Take the lock or raise naming its holder. A connection lost in the middle is resolved by
    reading the lock back: if it names us, the first attempt took it. A lock whose holder is provably
    gone is taken over, and returned for the caller to say so.

    The same round trip is the first contact with the state root: its id (written once), and the
    host as its resources tell it. With `own_root` (a host's root; a Slurm cluster's is shared by its
    login and compute nodes by design), the state root must be this host's (the module's rules). A
    second inventory name reaching a root whose lock this run holds through the first is refused by the
    lock itself. `seen`: the command's `Seen`, for what this host shares with its other hosts (notes)."""
    who = {**who, "host": who.get("host") or transport.name}
    key, run_id = (transport.name, base), str(who.get("run_id"))
    # the run is live from its first attempt (`_taking`): a second name of this root in this run, reading
    # the lock between the first's write and its return, must not take it "over"; another run's hold
    # of the same lock stays registered meanwhile
    attempt = (*key, run_id)
    with _holding_guard:
        _taking.add(attempt)
    try:
        taken = _take(transport, base, who, own_root=own_root)
        with _holding_guard:
            _holding[key] = run_id
    finally:
        with _holding_guard:
            _taking.discard(attempt)
    notes = seen.add(transport.name, taken.identity) if seen is not None else ()
    return Taken(taken.stale, taken.identity, taken.notes + notes)


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
                IDENTITY_FILE,
                ROOT_ID_FILE,
                SEEN_FILE,
            ],
            check=False,
        )
    except ConnectionLost:
        pass
    lines = done.stdout.splitlines() if done is not None else []
    identity = next((i for i in map(Identity.parse, lines) if i is not None), None)
    notes = tuple(
        _said(transport.name, root, line) for line in lines if line.startswith(("emptied ", "seen ", "restarted "))
    )
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
    """A note of the first contact: an empty file taken away, a root last used under another name, or
    by this host from another network namespace (restarted)."""
    word, _, rest = line.partition(" ")
    if word == "restarted":
        return (
            f"{host} reaches its state root {root} from a new network namespace under the same boot: the same "
            "host restarted (a container's new namespace); its root, and its releases, are taken as its own"
        )
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
    if done.rc == 12:
        boot, since, other = next((line[6:] for line in lines if line.startswith("clone ")), "? 0 ?").split(" ", 2)
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(int(since))) if since.isdigit() else "?"
        raise HostError(
            f"{name}: the state root {root} was written by {other} under boot id {boot[:12]} at {at}, after this "
            "boot began, though both have one machine-id: two clones of one image (an uncleared /etc/machine-id) "
            "on one shared root, not a reboot",
            host=name,
            fix=f"give {name} a `root:` of its own in the inventory, and a fresh /etc/machine-id to each clone "
            f"(systemd-machine-id-setup); if {other} is this machine before a reboot (a clock set back), "
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
            run = held.get("run_id")
            return run in _holding.values() or any(r == run for _, _, r in _taking)
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
