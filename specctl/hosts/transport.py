"""The transport: run a command on a host. Everything else a deploy needs (put a file atomically,
read a file, start a detached process) is built on `run` here, so the local host and SSH hosts
share one code path and differ only in how a command reaches the machine.

A command whose connection broke raises `ConnectionLost`: nobody knows whether it ran. Commands
that are safe to run twice (reads, signals, atomic renames) say `retry=True` and are sent again
on a fresh connection; the others let the caller decide.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from specctl.errors import ConnectionLost, HostError

# Start a command detached: its own session (so the whole process group can be stopped), stdin
# closed, output to a log, and its pid written atomically. $1 = directory, $2 = log, $3 = pid file.
_START = 'cd "$1" && log="$2" && pidfile="$3" && shift 3 && setsid "$@" >>"$log" 2>&1 </dev/null & ' \
         'pid=$!; printf "%s\\n" "$pid" >"$3.tmp" && mv -f "$3.tmp" "$3" && printf "%s\\n" "$pid"'
# Write stdin to a file through a temporary sibling and a rename: readers see old or new, never half.
# Its directory is made when missing.
_PUT = ('mkdir -p "$(dirname "$1")" && tmp="$1.tmp.$$" && '
        '{ cat >"$tmp" && chmod "$2" "$tmp" && mv -f "$tmp" "$1"; } || { rm -f "$tmp"; exit 1; }')


@dataclass(frozen=True)
class Completed:
    """A finished command: exit status, its output as bytes, and its error text."""

    rc: int
    out: bytes
    stderr: str

    @property
    def stdout(self) -> str:
        return self.out.decode(errors="replace")


class Runner(Protocol):
    def __call__(self, argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None,
                 stdin: bytes | None) -> Completed: ...


class Transport:
    """A host reached through `runner`; `name` for messages, `address` for its servers' ports."""

    def __init__(self, name: str, address: str, runner: Runner) -> None:
        self.name = name
        self.address = address
        self._runner = runner

    def run(self, argv: Sequence[str], *, timeout_s: float = 60.0, env: Mapping[str, str] | None = None,
            stdin: bytes | None = None, check: bool = True, retry: bool = False) -> Completed:
        """Run argv (a list, never a shell string) on the host; a non-zero exit raises unless check=False.
        With `retry`, a broken connection is reopened and the command sent once more."""
        try:
            done = self._runner(argv, timeout_s=timeout_s, env=env, stdin=stdin)
        except ConnectionLost:
            if not retry:
                raise
            done = self._runner(argv, timeout_s=timeout_s, env=env, stdin=stdin)
        if check and done.rc != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise HostError(f"{self.name}: `{shlex.join(argv)[:200]}` exited {done.rc}: {' | '.join(tail)}", host=self.name)
        return done

    def put(self, path: str, data: bytes, *, mode: int = 0o644) -> None:
        self.run(["sh", "-c", _PUT, "sh", path, format(mode, "o")], stdin=data, retry=True)

    def read(self, path: str) -> bytes | None:
        """A file's exact bytes, or None when it cannot be read."""
        done = self.run(["cat", path], check=False, retry=True)
        return done.out if done.rc == 0 else None

    def start(self, argv: Sequence[str], *, cwd: str, log: str, pidfile: str, env: Mapping[str, str] | None = None) -> int:
        """Start argv detached in its own session; returns its pid (= its process group id)."""
        done = self.run(["sh", "-c", _START, "sh", cwd, log, pidfile, *argv], env=env)
        return int(done.stdout.strip().splitlines()[-1])
