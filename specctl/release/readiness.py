"""Waiting for a started server: ready means a real generation answered (`/health_generate`).

Readiness is asked over HTTP and the server's liveness and log over SSH (from its platform: a process
group, or a scheduler's job, which may first wait in a queue); a connection that drops and comes
back in the middle only costs a poll, and one that stays down for LOGIN_BLIP_BUDGET_S (or past the
start-up budget, whichever ends first) ends the wait as the lost connection it is.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence

from specctl.cancel import NEVER, CancelToken
from specctl.constants import LOGIN_BLIP_BUDGET_S
from specctl.errors import ConnectionLost, HostError
from specctl.release.platform import Platform
from specctl.release.release import Release
from specctl.verdict.client import EngineClient


class StartupFailed(HostError):
    """The server exited, or did not answer a generation within its start-up budget."""

    def __init__(self, message: str, *, host: str, log: list[str], fix: str | None = None) -> None:
        super().__init__(message, host=host, fix=fix)
        self.log = log


def phase_of(lines: Sequence[str], phases: Sequence[tuple[str, str]]) -> str:
    """The latest start-up phase the log shows (weights loaded, CUDA graphs captured, ...)."""
    reached = "starting"
    for marker, phase in phases:
        if any(marker in line for line in lines):
            reached = phase
    return reached


def wait_ready(
    platform: Platform,
    release: Release,
    port: int,
    phases: Sequence[tuple[str, str]],
    *,
    handle: int,
    budget_s: float,
    on_progress: Callable[[str], None] = lambda phase: None,
    on_note: Callable[[str], None] = lambda text: None,
    poll_s: float = 0.5,
    cancel: CancelToken = NEVER,
) -> float:
    """Block until the server answers a generation; returns the seconds it took. The first polls
    come quickly (a server that starts in a moment is not kept waiting a whole poll), then its
    health every `poll_s` and its platform (process or job, log) at the platform's own pace. The
    budget covers a scheduler's queue too: a job that waits past it has failed to start."""
    t = release.transport
    start = time.monotonic()
    lines: list[str] = []
    waiting: str | None = None
    pause = look_pause = min(0.05, poll_s)
    next_look = start
    address: str | None = t.address if platform.on_host else None  # a job's is known once it is placed
    lost_since: float | None = None  # since when the host's connection has been down
    while True:
        if address is not None:
            host, reached = platform.endpoint(address, port)
            client = EngineClient(f"http://{host}:{reached}", timeout_s=30, cancel=cancel)
            if client.healthy(timeout_s=min(30.0, max(1.0, budget_s - (time.monotonic() - start)))):
                on_progress("ready")
                return time.monotonic() - start
        if time.monotonic() >= next_look:
            try:
                seen = platform.observe(release, handle)
                alive, lines, waiting, ended = seen.alive, seen.lines, seen.waiting, seen.ended
                for note in seen.notes:
                    on_note(note)
                address, lost_since = seen.address or address, None
            except ConnectionLost as lost:
                alive, ended = True, None  # unknown: the server may well be loading; its health decides, or the budget
                lost_since = lost_since or time.monotonic()
                if time.monotonic() - lost_since > LOGIN_BLIP_BUDGET_S:
                    raise ConnectionLost(
                        f"{lost.message} (the connection stayed lost for more than {LOGIN_BLIP_BUDGET_S:.0f} s "
                        "while the server started)",
                        host=t.name,
                        fix=lost.fix,
                    ) from None
                on_progress("host connection lost; still waiting")
            if not alive:
                raise StartupFailed(
                    f"{t.name}: the server exited during start-up" + (f" ({ended})" if ended else ""),
                    host=t.name,
                    log=lines[-20:],
                    fix="read the server log lines shown with this error; `specctl logs` shows the whole log",
                )
            next_look = time.monotonic() + look_pause
            look_pause = min(look_pause * 2, max(poll_s, platform.poll_s))
        if time.monotonic() - start > budget_s:
            raise StartupFailed(
                f"{t.name}: no generation within the {budget_s:.0f} s start-up budget"
                + (f" ({waiting})" if waiting else ""),
                host=t.name,
                log=lines[-20:],
                fix="raise the start-up budget (--startup-timeout), or read the log for a hang",
            )
        on_progress(waiting or phase_of(lines, phases))
        cancel.sleep(pause)
        pause = min(pause * 2, poll_s)
