"""The `local` host: this machine, without SSH."""

from __future__ import annotations

import os
import subprocess
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence

from specctl.hosts.transport import Completed, OnOutput, Transport

LOCAL = "local"


def _run(
    argv: Sequence[str],
    *,
    timeout_s: float,
    env: Mapping[str, str] | None,
    stdin: bytes | None,
    on_stdout: OnOutput | None = None,
) -> Completed:
    if on_stdout is not None:
        return _streamed(argv, timeout_s=timeout_s, env=env, on_stdout=on_stdout)
    try:
        done = subprocess.run(
            list(argv), input=stdin, capture_output=True, timeout=timeout_s, env={**os.environ, **env} if env else None
        )
    except subprocess.TimeoutExpired:
        return Completed(124, b"", f"timed out after {timeout_s:.0f} s")
    except FileNotFoundError as exc:
        return Completed(127, b"", str(exc))
    return Completed(done.returncode, done.stdout, done.stderr.decode(errors="replace"))


def _streamed(
    argv: Sequence[str], *, timeout_s: float, env: Mapping[str, str] | None, on_stdout: OnOutput
) -> Completed:
    """A command whose output is handed on as it comes; its error text is kept in a file, not a pipe
    that nobody reads while it runs."""
    deadline = time.monotonic() + timeout_s
    with tempfile.TemporaryFile() as err:
        try:
            process = subprocess.Popen(
                list(argv),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=err,
                env={**os.environ, **env} if env else None,
            )
        except FileNotFoundError as exc:
            return Completed(127, b"", str(exc))
        assert process.stdout is not None
        out = bytearray()
        timer = threading.Timer(timeout_s, process.kill)
        timer.start()
        try:
            while data := os.read(process.stdout.fileno(), 65536):
                out += data
                on_stdout(data)
            code = process.wait()
        finally:
            timer.cancel()
            process.stdout.close()  # else left to the garbage collector (a ResourceWarning)
        err.seek(0)
        text = err.read().decode(errors="replace")
    if time.monotonic() > deadline and code < 0:
        return Completed(124, bytes(out), f"timed out after {timeout_s:.0f} s")
    return Completed(code, bytes(out), text)


def local_transport(name: str = LOCAL) -> Transport:
    """This machine; `name` is what messages call it (a cluster whose login node this is)."""
    return Transport(name, "127.0.0.1", _run)
    return True
