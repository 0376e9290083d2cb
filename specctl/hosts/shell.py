"""A long-lived `sh` on an SSH connection that runs one command per round trip.

A command on its own SSH channel costs three round trips (open the channel, exec, the answer) and
the login shell's start-up files: sshd runs every command through `$SHELL -c`, and Debian's bash
reads ~/.bashrc then, where a conda or pyenv init costs about 0.1 s of the host's CPU each time.
This shell pays both once per connection; each command is then one write and one answer.

The frame the client writes: a line "<command bytes> <stdin bytes> <timeout s>", the command
(argv joined for sh), then its stdin. The shell reads the exact byte counts with `head -c` (GNU
and busybox read no further than asked), runs the command in a child `sh` under `timeout` with
that stdin (the rest of it is drained when the command leaves it unread) and answers like
`Transport.run_all`: a line "rc out-bytes err-bytes", then the output and the error text. A
command out of time is stopped on the host (its process group; rc 124) and what it wrote comes
back. Output goes through a private temporary directory; stdin, which carries secrets, only ever
goes through a pipe. Every command is read by `sh`, whatever the user's login shell is.

A temporary directory whose file system filled up loses what the command wrote (its output files
cannot be written or are cut short): when a byte cannot be written there after the command, the
answer is "rc 0 0 nospace DIR" ("vanished" when the directory itself is gone), and the command's
result is `OutputLost`, never an empty output that a caller would read as "nothing there".
"""

from __future__ import annotations

import shlex
import time

import paramiko

from specctl.hosts.transport import Completed

READY = b"specctl-shell 1\n"
ANSWER_SLACK_S = 15.0  # past a command's own timeout: the kill's grace (5 s) and the network
# Before it says it is ready, the shell checks what its framing relies on: GNU head (busybox's reads
# ahead of what it was asked for, which would swallow the next frame) and a `timeout` with -k. A
# host without them never says ready, and gets a channel per command.
_LOOP = (
    "head --version 2>/dev/null | grep -q GNU || exit 3; timeout -k 1 5 true || exit 3; "
    'd=$(mktemp -d) || exit 1; trap \'rm -rf "$d"\' EXIT; printf "specctl-shell 1\\n"; '
    'while IFS=" " read -r nc ni t; do '
    'c=$(head -c "$nc"; printf x); c=${c%x}; '
    'head -c "$ni" | { timeout -k 5 "$t" sh -c "$c" >"$d/o" 2>"$d/e"; r=$?; cat >/dev/null; exit $r; }; rc=$?; '
    'if [ -f "$d/o" ] && [ -f "$d/e" ] && { printf x >"$d/p"; } 2>/dev/null; then '
    'printf "%s %s %s\\n" "$rc" $(wc -c <"$d/o") $(wc -c <"$d/e"); cat "$d/o" "$d/e"; '
    'elif [ -d "$d" ]; then printf "%s 0 0 nospace %s\\n" "$rc" "${d%/*}"; '
    'else printf "%s 0 0 vanished %s\\n" "$rc" "$d"; fi; rm -f "$d/o" "$d/e" "$d/p"; done'
)


class ShellGone(Exception):
    """The shell's channel closed: the command may or may not have run."""


class OutputLost(Exception):
    """The command ran (exit status `rc`) but its output was lost: `where` has no space left, or the
    shell's temporary directory `where` vanished (`vanished`: removed, or a file system mounted over it)."""

    def __init__(self, where: str, rc: int, *, vanished: bool) -> None:
        super().__init__(where)
        self.where = where
        self.rc = rc
        self.vanished = vanished


class RemoteShell:
    """One `sh` on one channel; not thread-safe (its owner serialises commands)."""

    def __init__(self, transport: paramiko.Transport, *, timeout_s: float) -> None:
        self.channel = transport.open_session(timeout=timeout_s)
        self._buffer = bytearray()
        try:
            self.channel.exec_command(f"exec sh -c {shlex.quote(_LOOP)}")
            deadline = time.monotonic() + timeout_s
            while True:  # the login shell's start-up files may print before the loop does
                line = self._line(deadline)
                if line is None:
                    raise ShellGone("the shell did not start in time")
                if line == READY:
                    return
        except BaseException:
            self.close()
            raise

    @property
    def open(self) -> bool:
        return not self.channel.closed and not self.channel.eof_received

    def run(self, command: str, stdin: bytes, *, timeout_s: float) -> Completed | None:
        """The command's result; None when the host did not answer even a while after the command's
        own time was up (the shell is then closed)."""
        body = command.encode()
        self.channel.sendall(b"%d %d %.3f\n" % (len(body), len(stdin), max(timeout_s, 0.001)) + body + stdin)
        deadline = time.monotonic() + timeout_s + ANSWER_SLACK_S
        header = self._line(deadline)
        fields = header.split() if header is not None else []
        if len(fields) == 5 and fields[3] in (b"nospace", b"vanished") and fields[0].lstrip(b"-").isdigit():
            self.close()  # a shell whose directory is gone or full answers no better next time
            raise OutputLost(fields[4].decode(errors="replace"), int(fields[0]), vanished=fields[3] == b"vanished")
        if header is None or len(fields) != 3 or not all(f.lstrip(b"-").isdigit() for f in fields):
            self.close()
            if header is None:
                return None
            raise ShellGone(f"the shell answered {header[:80]!r}")
        rc, n_out, n_err = (int(f) for f in fields)
        body_bytes = self._exactly(n_out + n_err, deadline)
        if body_bytes is None:
            self.close()
            return None
        err = body_bytes[n_out:].decode(errors="replace")
        return Completed(rc, body_bytes[:n_out], err or (f"timed out after {timeout_s:.0f} s" if rc == 124 else ""))

    def close(self) -> None:
        self.channel.close()

    def _line(self, deadline: float) -> bytes | None:
        while (end := self._buffer.find(b"\n")) < 0:
            if not self._fill(deadline):
                return None
        line = bytes(self._buffer[: end + 1])
        del self._buffer[: end + 1]
        return line

    def _exactly(self, count: int, deadline: float) -> bytes | None:
        while len(self._buffer) < count:
            if not self._fill(deadline):
                return None
        data = bytes(self._buffer[:count])
        del self._buffer[:count]
        return data

    def _fill(self, deadline: float) -> bool:
        """Read what arrives before the deadline; False when it passed. The shell's own error text
        (the start-up files', never a command's) is read and dropped so it cannot fill the window."""
        while self.channel.recv_stderr_ready():
            self.channel.recv_stderr(65536)
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.channel.settimeout(min(left, 1.0))
        try:
            data = self.channel.recv(65536)
        except TimeoutError:
            return True  # loop again: the deadline decides
        if not data:
            raise ShellGone("the shell's channel closed")
        self._buffer += data
        return True
