"""The transport: run a command on a host. Everything else a deploy needs (read a file, start a
detached process, several commands in one round trip) is built on `run` here, so the local host and
SSH hosts share one code path and differ only in how a command reaches the machine. Writing a file is
release/whole.py's (`Transport.put` hands it on): one writer, whole or not at all.

A command whose connection broke raises `ConnectionLost`: nobody knows whether it ran. Commands
that are safe to run twice (reads, signals, atomic renames) say `retry=True` and are sent again
on a fresh connection; the others let the caller decide.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from specctl.errors import ConnectionLost, HostError

# Start a command detached: its own session (so the whole process group can be stopped), stdin
# closed, output to a log, and its pid written atomically. $1 = directory, $2 = log, $3 = pid file.
_START = (
    'cd "$1" && log="$2" && pidfile="$3" && shift 3 && setsid "$@" >>"$log" 2>&1 </dev/null & '
    'pid=$!; printf "%s\\n" "$pid" >"$3.tmp" && mv -f "$3.tmp" "$3" && printf "%s\\n" "$pid"'
)
# Several commands in one round trip, one after another, each with stdin closed. For each: a line
# "rc out-bytes err-bytes", then its output and its error text, byte-exact.
_ALL = (
    'd=$(mktemp -d) || exit 1; trap \'rm -rf "$d"\' EXIT; for c in "$@"; do '
    'sh -c "$c" >"$d/o" 2>"$d/e" </dev/null; rc=$?; '
    'printf "%s %s %s\\n" "$rc" $(wc -c <"$d/o") $(wc -c <"$d/e"); cat "$d/o" "$d/e"; done'
)


@dataclass(frozen=True)
class Completed:
    """A finished command: exit status, its output as bytes, and its error text."""

    rc: int
    out: bytes
    stderr: str

    @property
    def stdout(self) -> str:
        return self.out.decode(errors="replace")


OnOutput = Callable[[bytes], None]


class Runner(Protocol):
    """Runs argv on a host; with `on_stdout`, hands on the output as it arrives (a long command's progress)."""

    def __call__(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float,
        env: Mapping[str, str] | None,
        stdin: bytes | None,
        on_stdout: OnOutput | None = None,
    ) -> Completed: ...


class Transport:
    """A host reached through `runner`; `name` for messages, `address` for its servers' ports."""

    def __init__(
        self,
        name: str,
        address: str,
        runner: Runner,
        forward: Callable[[str, int], tuple[str, int]] | None = None,
        close: Callable[[], None] | None = None,
    ) -> None:
        self.name = name
        self.address = address
        self._runner = runner
        self._forward = forward
        self._close = close

    def close(self) -> None:
        """End the connection and its tunnels (a later command opens a new one)."""
        if self._close is not None:
            self._close()

    def forward(self, host: str, port: int) -> tuple[str, int]:
        """Where this machine reaches (host, port) as the host itself would: through the host's
        connection when it has one (an SSH tunnel), else directly."""
        return self._forward(host, port) if self._forward is not None else (host, port)

    def run(
        self,
        argv: Sequence[str],
        *,
        timeout_s: float = 60.0,
        env: Mapping[str, str] | None = None,
        stdin: bytes | None = None,
        check: bool = True,
        retry: bool = False,
    ) -> Completed:
        """Run argv (a list, never a shell string) on the host; a non-zero exit raises unless check=False.
        With `retry`, a broken connection is reopened and the command sent once more."""
        try:
            done = self._runner(argv, timeout_s=timeout_s, env=env, stdin=stdin)
        except ConnectionLost:
            if not retry:
                raise
            done = self._runner(argv, timeout_s=timeout_s, env=env, stdin=stdin)
        return self.checked(argv, done) if check else done

    def stream(
        self,
        argv: Sequence[str],
        on_line: Callable[[str], None],
        *,
        timeout_s: float,
        env: Mapping[str, str] | None = None,
    ) -> Completed:
        """Run argv and hand each line of its output to `on_line` as it comes (the result's output
        holds it all too). Not retried: a long command is the caller's to resume."""
        pending = bytearray()

        def chunk(data: bytes) -> None:
            pending.extend(data)
            while (end := pending.find(b"\n")) >= 0:
                on_line(pending[:end].decode(errors="replace"))
                del pending[: end + 1]

        return self._runner(argv, timeout_s=timeout_s, env=env, stdin=None, on_stdout=chunk)

    def run_all(
        self, commands: Sequence[Sequence[str]], *, timeout_s: float = 60.0, retry: bool = False
    ) -> list[Completed]:
        """Run several commands in one round trip, in order, whatever each one's exit status; each
        result is checked by the caller (`checked`). Latency, not bandwidth, is what a fleet waits on."""
        done = self.run(
            ["sh", "-c", _ALL, "sh", *(shlex.join(argv) for argv in commands)],
            timeout_s=timeout_s,
            retry=retry,
            check=False,
        )
        results: list[Completed] = []
        rest = done.out
        for _ in commands:
            header, _, body = rest.partition(b"\n")
            fields = header.split()
            if (
                len(fields) != 3
                or not all(f.isdigit() for f in fields[1:])
                or len(body) < int(fields[1]) + int(fields[2])
            ):
                break  # the batch stopped here (timed out, killed): this command and the rest did not finish
            rc, n_out, n_err = int(fields[0]), int(fields[1]), int(fields[2])
            results.append(Completed(rc, body[:n_out], body[n_out : n_out + n_err].decode(errors="replace")))
            rest = body[n_out + n_err :]
        unfinished = Completed(done.rc or -1, b"", done.stderr or "did not finish")
        return results + [unfinished] * (len(commands) - len(results))

    def checked(self, argv: Sequence[str], done: Completed) -> Completed:
        """`done`, or the HostError its non-zero exit status is."""
        if done.rc != 0:
            tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
            raise HostError(
                f"{self.name}: `{shlex.join(argv)[:200]}` exited {done.rc}: {' | '.join(tail)}", host=self.name
            )
        return done

    def put(self, path: str, data: bytes, *, mode: int = 0o644, then: Sequence[str] = ()) -> None:
        """Write a file whole (release/whole.py's `put`: synced, then renamed into place; a full disk said
        as such). `then`: a command run in the same round trip after the write, whether or not it
        succeeded (the write's failure is still raised)."""
        from specctl.release import whole  # the writer sits above the transport it writes through

        whole.put(self, path, data, mode=mode, then=then)

    def read(self, path: str) -> bytes | None:
        """A file's exact bytes, or None when it cannot be read."""
        done = self.run(["cat", path], check=False, retry=True)
        return done.out if done.rc == 0 else None

    def start(
        self, argv: Sequence[str], *, cwd: str, log: str, pidfile: str, env: Mapping[str, str] | None = None
    ) -> int:
        """Start argv detached in its own session; returns its pid (= its process group id)."""
        done = self.run(["sh", "-c", _START, "sh", cwd, log, pidfile, *argv], env=env)
        return int(done.stdout.strip().splitlines()[-1])
