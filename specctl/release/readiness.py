"""Waiting for a started server: ready means a real generation answered (`/health_generate`)."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from specctl.cancel import NEVER, CancelToken
from specctl.errors import HostError
from specctl.release.release import Release, log_tail, observe, pid
from specctl.verdict.client import EngineClient


class StartupFailed(HostError):
    """The server exited, or did not answer a generation within its start-up budget."""

    def __init__(self, message: str, *, host: str, log: list[str], fix: str | None = None) -> None:
        super().__init__(message, host=host, fix=fix)
        self.log = log
        self.restored: str | None = None  # the previous release started again, if there was one


def stage_of(lines: Sequence[str], stages: Sequence[tuple[str, str]]) -> str:
    """The latest start-up stage the log shows."""
    reached = "starting"
    for marker, stage in stages:
        if any(marker in line for line in lines):
            reached = stage
    return reached


def wait_ready(release: Release, port: int, stages: Sequence[tuple[str, str]], *, budget_s: float,
               on_progress: Callable[[str], None] = lambda stage: None, poll_s: float = 0.5,
               process_group: int | None = None, cancel: CancelToken = NEVER) -> float:
    """Block until the server answers a generation; returns the seconds it took."""
    t = release.transport
    client = EngineClient(f"http://{t.address}:{port}", timeout_s=30)
    start = time.monotonic()
    group = process_group if process_group is not None else pid(release)
    while True:
        if client.healthy(timeout_s=30):
            on_progress("ready")
            return time.monotonic() - start
        alive, lines = observe(release, group) if group is not None else (False, log_tail(release, 200))
        if not alive:
            raise StartupFailed(f"{t.name}: the server exited during start-up", host=t.name, log=lines[-20:],
                                fix="read the log lines above; `specctl logs` shows the whole log")
        if time.monotonic() - start > budget_s:
            raise StartupFailed(f"{t.name}: no generation within the {budget_s:.0f} s start-up budget", host=t.name,
                                log=lines[-20:], fix="raise the start-up budget, or read the log for a hang")
        on_progress(stage_of(lines, stages))
        cancel.sleep(poll_s)
