"""A test run stopped by SIGINT or SIGTERM leaves nothing behind (a pytest plugin; tests/conftest.py loads it).

- SIGINT: Python raises KeyboardInterrupt and pytest unwinds: the test stops, every fixture's
  finalizer runs, the run ends. specctl's own handler, while an in-process CLI call has it installed,
  unwinds the command and then passes the signal on (specctl.cancel.passed_on), so one Ctrl-C still
  ends the run.
- SIGTERM: pytest would die at once, without any teardown. For the session this plugin turns it
  into `Terminated` (a KeyboardInterrupt) in the main thread, so the run unwinds exactly as for
  Ctrl-C and exits 143. Further SIGTERMs while it unwinds are ignored, so a finalizer is not cut
  short; the labs also stop from `atexit`, the last resort for what a second Ctrl-C cut short.
- Under pytest-xdist, SIGTERM reaches only the controller (a terminal's Ctrl-C reaches every worker):
  the controller passes it on to its workers and waits for them to tear down before it unwinds
  itself, since xdist would otherwise end them before their labs are stopped.
- At the end of the session every server that specctl started for a test (a release's server.pid
  under the session's temporary directory) is killed by process group, whichever test left it.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Generator, Iterator
from pathlib import Path
from types import FrameType
from typing import Any

import pytest

TERMINATED_EXIT = 128 + signal.SIGTERM


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the main thread: pytest stops and tears down as it does for Ctrl-C."""


class _State:
    previous: Any = None  # the SIGTERM handler before this plugin's; None: not installed
    terminated = False
    basetemp: Path | None = None  # this process's temporary root (an xdist worker's lies in its controller's)


WORKER_TEARDOWN_S = 120.0  # how long the controller waits for its workers' labs to stop


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    if _State.terminated:  # the run is already unwinding: let its finalizers finish
        return
    _State.terminated = True
    _stop_workers(signum)
    raise Terminated(f"stopped by {signal.Signals(signum).name}")


def _stop_workers(signum: int) -> None:
    """The xdist workers this process started (none in a worker or a plain run): signalled, then waited for."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        return
    workers = [pid for pid in _children() if _is_worker(pid)]
    for pid in workers:
        try:
            os.kill(pid, signum)
        except ProcessLookupError:
            pass
    # a worker that has torn down waits on this process to close its channel: its marker, not its exit, is the sign
    deadline = time.monotonic() + WORKER_TEARDOWN_S
    while workers and time.monotonic() < deadline:
        done = len(list(_State.basetemp.glob("*.torn-down"))) if _State.basetemp is not None else 0
        workers = [pid for pid in workers if Path(f"/proc/{pid}").exists() and not _zombie(pid)]
        if done >= len(workers):
            return
        time.sleep(0.1)


def _children() -> list[int]:
    pids: list[int] = []
    for task in Path(f"/proc/{os.getpid()}/task").iterdir():
        try:
            pids += [int(p) for p in (task / "children").read_text().split()]
        except OSError:
            pass
    return pids


def _is_worker(pid: int) -> bool:
    """An xdist worker: a Python that execnet started reading its bootstrap from standard input."""
    try:
        return b"exec(eval(sys.stdin.readline()))" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return True


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _State.basetemp = session.config._tmp_path_factory.getbasetemp()  # type: ignore[attr-defined]
    if threading.current_thread() is threading.main_thread() and _State.previous is None:
        _State.previous = signal.signal(signal.SIGTERM, _on_sigterm)
        _State.terminated = False


@pytest.hookimpl(hookwrapper=True)
def pytest_sessionfinish(session: pytest.Session) -> Generator[None, None, None]:
    yield  # the session's fixtures are torn down in here: SIGTERM stays handled until they are
    if _State.terminated:
        session.exitstatus = TERMINATED_EXIT
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker and _State.basetemp is not None:  # torn down: the controller waiting on SIGTERM may go on
        (_State.basetemp.parent / f"{worker}.torn-down").touch()
    _restore()


def pytest_unconfigure(config: pytest.Config) -> None:
    _restore()


def _restore() -> None:
    if _State.previous is not None:
        signal.signal(signal.SIGTERM, _State.previous)
        _State.previous = None


@pytest.fixture(scope="session", autouse=True)
def _no_server_left(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    yield
    kill_servers(tmp_path_factory.getbasetemp())


def servers(root: Path) -> list[int]:
    """The process groups of the servers specctl started under `root`: the group each release's
    server.pid names, kept where a live process of that group has a release under `root` in its
    environment (SPECCTL_RELEASE_DIR, which every server inherits from its launch), so a pid that an
    unrelated process has reused since is never taken."""
    try:
        pidfiles = list(root.rglob("server.pid"))
    except OSError:  # a directory removed while it was read
        pidfiles = []
    named = set()
    for pidfile in pidfiles:
        try:
            named.add(int(pidfile.read_text().strip()))
        except (OSError, ValueError):
            continue
    if not named:
        return []
    marker = b"SPECCTL_RELEASE_DIR=" + str(root).encode() + b"/"
    groups = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            group = os.getpgid(int(entry.name))
            if group in named and group not in groups:
                if any(v.startswith(marker) for v in (entry / "environ").read_bytes().split(b"\0")):
                    groups.add(group)
        except OSError:  # gone meanwhile
            continue
    return sorted(groups)


def kill_servers(root: Path) -> list[int]:
    """Kill (SIGKILL, by process group) the servers `servers(root)` finds; their groups."""
    groups = servers(root)
    for group in groups:
        try:
            os.killpg(group, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return groups
