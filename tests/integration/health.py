"""Polling a server's /health from outside while something else runs: did it answer, and how long
was the longest stretch without an answer (a deploy's outage)."""

from __future__ import annotations

import threading
import time
import urllib.request
from types import TracebackType


class HealthPolls:
    """Polls `url` every `every_s` in a thread for the `with` block; `polls` are (unix time, answered)."""

    def __init__(self, url: str, every_s: float = 0.05) -> None:
        self.url, self.every_s = url, every_s
        self.polls: list[tuple[float, bool]] = []
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._poll, daemon=True)

    def _poll(self) -> None:
        while not self._done.is_set():
            try:
                with urllib.request.urlopen(self.url, timeout=1) as answer:
                    self.polls.append((time.time(), answer.status == 200))
            except OSError:
                self.polls.append((time.time(), False))
            time.sleep(self.every_s)

    def __enter__(self) -> HealthPolls:
        self._thread.start()
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self._done.set()
        self._thread.join()

    def wait_answered(self, timeout_s: float) -> None:
        """Keep polling until the server answers (or the time is up)."""
        deadline = time.monotonic() + timeout_s
        while not (self.polls and self.polls[-1][1]) and time.monotonic() < deadline:
            time.sleep(self.every_s)

    def longest_gap(self, since: float = 0.0) -> float:
        """The longest stretch without an answer, from its first failed poll to the next answer."""
        longest, down = 0.0, None
        for t, ok in self.polls:
            if t < since:
                continue
            if not ok and down is None:
                down = t
            elif ok and down is not None:
                longest, down = max(longest, t - down), None
        return longest
