"""Progress of a command on several hosts, as kubectl's `rollout status` shows it: one line per
host that changes in place on a terminal, and plain lines, each said once, anywhere else.

A flow says three things about a host (specctl/flows/session.py): a stage began (a step of a
change, or `verify`), what it does now (a request counter, a readiness phase: replaced by the next),
and notes that must stay said (a lock taken over, a restore). On a terminal the stage and what it
does now fill the host's live line and notes print above it; without one, a line is printed when a
stage begins and for each note, and what a host does now only as a heartbeat when it has said
nothing for `PLAIN_HEARTBEAT_S` (a CI log that is silent for ten minutes looks hung).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from rich.console import Console, RenderableType
from rich.text import Text

PLAIN_HEARTBEAT_S = 30.0  # without a terminal: what a quiet host does, said again after this long

# the steps of a change (specctl/flows/change.py) and the stages flows name themselves, as people read them
STAGE_WORDS = {
    "preflight": "preflight",
    "stage": "staging checkpoints",
    "materialise": "writing the release",
    "prove": "proving the release",
    "stop-previous": "stopping the running server",
    "start": "starting",
    "ready": "waiting until it serves",
    "switch": "switching current",
    "measure": "measuring",
    "verify": "verifying",
}


@dataclass
class _Host:
    began: float
    stage: str = ""
    doing: str = ""
    said_at: float = 0.0  # when its last plain line was printed
    said: str = ""


@dataclass
class HostProgress:
    """The sink a recorded command's Context reports to (`progress`, `note`, `event`)."""

    console: Console
    live: bool  # a terminal: lines that change in place
    clock: Callable[[], float] = time.monotonic
    _hosts: dict[str, _Host] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _display: Any = None  # rich.live.Live while it runs

    def __enter__(self) -> HostProgress:
        if self.live:
            from rich.live import Live

            self._display = Live(self, console=self.console, transient=True, refresh_per_second=4)
            self._display.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._display is not None:
            self._display.stop()
            self._display = None

    def _host(self, name: str) -> _Host:
        if name not in self._hosts:
            self._hosts[name] = _Host(self.clock())
        return self._hosts[name]

    def event(self, host: str, fields: dict[str, Any]) -> None:
        """A structured event: a step that began sets the host's stage; a step of a stage (tune's
        candidate's, named `step [candidate]`) is what the host does now."""
        if fields.get("event") != "step" or fields.get("state") != "began":
            return
        step, _, within = str(fields["step"]).partition(" [")
        words = STAGE_WORDS.get(step, step)
        if within:
            self.progress(host, words)
            return
        with self._lock:
            h = self._host(host)
            h.stage, h.doing = words, ""
            line = None if self.live else self._line(host, h, words)
        self._print(line)

    def progress(self, host: str, text: str) -> None:
        """What the host does now: its live line, or a heartbeat line when it has been quiet."""
        with self._lock:
            h = self._host(host)
            h.doing = text
            quiet = not self.live and self.clock() - h.said_at >= PLAIN_HEARTBEAT_S
            line = self._line(host, h, f"{h.stage}: {text}" if h.stage else text) if quiet else None
        self._print(line)

    def note(self, host: str, text: str) -> None:
        """Said once, and kept above the live lines."""
        with self._lock:
            line = self._line(host, self._host(host), text)
        self._print(line)

    def _line(self, host: str, h: _Host, text: str) -> Text | None:
        """The line to print for a host, or None when it would say again what it just said."""
        if text == h.said:
            return None
        h.said, h.said_at = text, self.clock()
        return Text.assemble((host, "dim"), f": {text}")

    def _print(self, line: Text | None) -> None:
        # outside the lock: on a terminal, printing redraws the live lines, which take the lock
        if line is not None:
            self.console.print(line, overflow="fold")

    def __rich__(self) -> RenderableType:
        """The live lines: host, stage, what it does now, time since it began."""
        from rich.table import Table

        table = Table.grid(padding=(0, 1))
        for _ in range(3):
            table.add_column(no_wrap=True)
        table.add_column(no_wrap=True, overflow="ellipsis")
        now = self.clock()
        with self._lock:
            for name, h in self._hosts.items():
                table.add_row(
                    Text(name, style="bold"),
                    Text(f"{now - h.began:4.0f} s", style="dim"),
                    h.stage or "connecting",
                    Text(h.doing, style="dim"),
                )
        return table
