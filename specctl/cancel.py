"""Cancellation: SIGTERM or SIGINT asks the running flow to stop at its next safe point.

A deploy must not die between "old server stopped" and "`current` switched": the first signal sets
a flag the flows check between steps (and while they wait), so they put the host back in a known
state, release the lock and let the ledger close the run as killed. A second signal stops at once.

A program that runs the CLI inside itself (the tests, through `main(argv)`) wraps the call in
`passed_on()`: a signal the command caught is handed, once the command has unwound, to the handler
that program had installed (Python's own SIGINT handler raises KeyboardInterrupt), so one Ctrl-C
stops the whole program and not only the command it happened to be running.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
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


SIGNALS = (signal.SIGTERM, signal.SIGINT)  # what asks a run to stop

NEVER = CancelToken()  # a token nobody cancels, for callers without signal handling


@contextmanager
def on_signals() -> Iterator[CancelToken]:
    """Within the block, the first SIGTERM/SIGINT cancels the token; a second one interrupts at once."""
    token = CancelToken()
    if threading.current_thread() is not threading.main_thread():
        yield token
        return

    def handle(signum: int, frame: FrameType | None) -> None:
        _caught(signum)
        if token.cancelled:
            raise KeyboardInterrupt
        token.cancel(signum)

    previous = {s: signal.signal(s, handle) for s in SIGNALS}
    try:
        yield token
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@dataclass
class _Relay:
    """What a `passed_on()` block caught: the signals, in order of arrival."""

    signals: list[int] = field(default_factory=list)


_relays: list[_Relay] = []  # the open passed_on() blocks, innermost last (main thread only)


def _caught(signum: int) -> None:
    if _relays:
        _relays[-1].signals.append(signum)


@contextmanager
def passed_on() -> Iterator[None]:
    """For a program that runs a command inside itself: a SIGINT or SIGTERM that arrives in the block
    is passed on to the program once the block has finished normally (the command unwound, reported
    and returned its exit code): the first one is raised again (`signal.raise_signal`) with the
    program's own handlers back in place, so its SIGINT handler raises KeyboardInterrupt there, an
    ignored signal stays ignored and a default one ends the process as it would have.

    Within the block, a signal that arrives while no `on_signals()` block is open interrupts the
    command with KeyboardInterrupt (as Python's own SIGINT handler would), where the program has a
    handler of its own for that signal; `on_signals()` blocks inside report theirs here."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    relay = _Relay()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        relay.signals.append(signum)
        raise KeyboardInterrupt

    previous = {s: signal.getsignal(s) for s in SIGNALS}
    for s, h in previous.items():
        if callable(h):  # a default or ignored signal is left to do what it does
            signal.signal(s, interrupt)
    _relays.append(relay)
    try:
        yield
    finally:
        _relays.remove(relay)
        for s, h in previous.items():
            if h is not None:
                signal.signal(s, h)
    if relay.signals:
        signal.raise_signal(relay.signals[0])
