"""A small state file on a host written whole or not at all: the root's identity, the lock, a release's
record. The content goes to a temporary name in the same directory, is synced to disk, then takes its
name: by `ln` where the file must not exist yet (exclusive: of two writers one wins, and the name
never shows a half-written file), by `mv` where it replaces one. A full disk leaves nothing behind
and is said as such ("no space left on HOST at PATH (N MB free)", exit 3), where a redirection into
the final name would leave an empty file that reads as a foreign identity or an unreadable lock.

`SH` is the shell the host runs (functions `whole` and `made`, for scripts that write several files in
one round trip, or a file beside other work); `put` is one file in one round trip, and the only
whole-file writer (`Transport.put` is this one).
"""

from __future__ import annotations

from collections.abc import Sequence

from specctl.errors import HostError
from specctl.hosts.transport import Completed, Transport

EXISTS = 17  # `whole ... link` found the name taken (EEXIST)
NO_SPACE = 28  # the disk (or the user's quota) is full (ENOSPC); stderr's last line says where

# `whole PATH HOW` writes stdin to PATH: HOW `link` only if PATH is absent (returns 17 if it is), `move`
# replacing it. The temporary file alone is synced (`sync FILE`, coreutils 8.24+; older coreutils, EL7's
# 8.22, and BusyBox: `dd conv=fsync` of nothing onto it; never a global `sync`, which would flush every
# dirty page of the host, gigabytes while a stage writes weights, for each lock or record) before it
# takes the name (`synced FILE`); the commands' messages are read in the C locale (set on each command,
# not exported: a script may start a server). Uses the variables d, e, r, t. A disk found full exits 28
# printing "specctl-no-space FREE_KB PATH" on stderr, the temporary file removed. `made DIR` is
# `mkdir -p` with the same word for a full disk.
SH = r"""
full() {
  case $2 in *"No space left"*|*"Disk quota exceeded"*) ;; *) [ -z "$2" ] || printf '%s\n' "$2" >&2; return 0;; esac
  d=$1; while [ ! -d "$d" ] && [ "$d" != "${d%/*}" ]; do d=${d%/*}; done
  printf 'specctl-no-space %s %s\n' "$(df -Pk "${d:-/}" 2>/dev/null | awk 'NR == 2 { print $4 }')" "$1" >&2
  exit 28
}
made() {
  [ -d "$1" ] && return 0
  e=$(LC_ALL=C mkdir -p "$1" 2>&1) && return 0
  full "$1" "$e"; return 1
}
synced() { LC_ALL=C sync "$1" 2>/dev/null || LC_ALL=C dd if=/dev/null of="$1" conv=notrunc,fsync 2>/dev/null; }
whole() {
  made "${1%/*}" || return 1
  t="${1%/*}/.${1##*/}.tmp.$$"
  e=$( { LC_ALL=C cat >"$t" && synced "$t"; } 2>&1 ) || {
    rm -f "$t"; full "$1" "$e"; return 1
  }
  if [ "$2" = link ]; then
    e=$(LC_ALL=C ln "$t" "$1" 2>&1); r=$?; rm -f "$t"
    [ $r -eq 0 ] && return 0; [ -e "$1" ] && return 17; full "$1" "$e"; return 1
  else
    e=$(LC_ALL=C mv -f "$t" "$1" 2>&1) || { rm -f "$t"; full "$1" "$e"; return 1; }
  fi
}
"""
# $1 path, $2 how (link|move), $3 mode; then a command run whatever became of the write ($4...).
_PUT = (
    SH
    + r"""
p=$1; how=$2; mode=$3; shift 3
( umask 077; whole "$p" "$how" ) && chmod "$mode" "$p"; rc=$?
[ $# -eq 0 ] || "$@"
exit $rc
"""
)


def put(transport: Transport, path: str, data: bytes, *, mode: int = 0o644, then: Sequence[str] = ()) -> None:
    """Write `path` whole (its directory made when missing), replacing it. `then`: a command run in the
    same round trip after the write, whether or not it succeeded (the write's failure is still raised)."""
    argv = ["sh", "-c", _PUT, "sh", path, "move", format(mode, "o"), *then]
    done = transport.run(argv, stdin=data, check=False, retry=True)
    if done.rc != 0:
        raise_for(transport, done, f"write {path}")


def raise_for(transport: Transport, done: Completed, what: str) -> None:
    """The HostError a failed write is: a full disk said as such, else the command's own words."""
    full = no_space(transport, done)
    if full is not None:
        raise full
    tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
    raise HostError(f"{transport.name}: could not {what} (exit {done.rc}): {' | '.join(tail)}", host=transport.name)


def no_space(transport: Transport, done: Completed) -> HostError | None:
    """The error of a write that found the disk full (exit 28 and its stderr line), else None."""
    if done.rc != NO_SPACE:
        return None
    line = next((s for s in reversed(done.stderr.splitlines()) if s.startswith("specctl-no-space ")), None)
    if line is None:
        return None
    _, free_kb, path = line.split(" ", 2)
    free = f"{int(free_kb) / 1024:.1f}" if free_kb.isdigit() else "?"
    return HostError(
        f"no space left on {transport.name} at {path} ({free} MB free)",
        host=transport.name,
        fix=f"free space on {transport.name}'s disk that holds {path.rsplit('/', 1)[0]}, or set `root:` for "
        f"{transport.name} in the inventory to a disk with room; nothing was left half-written",
    )
