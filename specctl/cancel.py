"""Cancellation: SIGTERM or SIGINT asks the running flow to stop at its next safe point.

A deploy must not die between "old server stopped" and "`current` switched": the first signal sets
a flag the flows check between steps (and while they wait), so they put the host back in a known
state, release the lock and let the ledger close the run as killed. A second signal stops at once.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType

from specctl.errors import SpecctlError


class Cancelled(SpecctlError):
    """The run was stopped by a signal; exit 128 + the signal's number, as a shell would report."""

    exit_code = 143

    def __init__(self, signum: int = signal.SIGTERM) -> None:
        name = signal.Signals(signum).name
        super().__init__(f"stopped by {name}", fix="the run is recorded as killed; the hosts keep a `current` release")
        self.exit_code = 128 + signum


class CancelToken:
    """Set once a signal arrived; `check()` raises Cancelled at a safe point."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self.signum = int(signal.SIGTERM)

    def cancel(self, signum: int = signal.SIGTERM) -> None:
        self.signum = signum
        self._event.set()

    @property
    def cancelled(self) -> bool:
        return self._event.is_set()

    def check(self) -> None:
        if self._event.is_set():
            raise Cancelled(self.signum)

    def sleep(self, seconds: float) -> None:
        """Sleep, waking early (and raising) when cancelled."""
        if self._event.wait(seconds):
            raise Cancelled(self.signum)


NEVER = CancelToken()  # a token nobody cancels, for callers without signal handling


@contextmanager
def on_signals() -> Iterator[CancelToken]:
    """Within the block, the first SIGTERM/SIGINT cancels the token; a second one interrupts at once."""
    token = CancelToken()
    if threading.current_thread() is not threading.main_thread():
        yield token
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        if token.cancelled:
            raise KeyboardInterrupt
        token.cancel(signum)

    previous = {s: signal.signal(s, handle) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield token
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
