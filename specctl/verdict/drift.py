"""Whether a serving release still accepts as it was verified to: one window's verdict, pure.

A window is `degraded` when its accept length is decided below the floor: the profile's gate, or
the release's verified interval's lower bound less `watch.tolerance` (accept-length units),
whichever is higher. It is `ok` when it is not, and `unknown` when there is too little traffic to
say (or the window was discarded, or a figure is not finite: NaN compares false with everything, and
would read as `ok`): never `degraded` on a guess, never `ok` on a NaN.

Watching looks again and again at one release; at a fixed 95 % each look would carry its own 5 %
chance of a false alarm, and a month of five-minute looks would alarm for certain. So the k-th look
at a release (counted in the ledger over every watch run, so `--once` from cron accumulates) is
taken at level 1 - α·6/(π²k²): the levels' misses sum to at most α over an unbounded run (alpha
spending), and the intervals widen only as the logarithm of k.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from specctl.verdict import stats
from specctl.verdict.window import Window

__all__ = ["Expectation", "WindowVerdict", "judge", "look_level"]

MIN_REQUESTS = 8  # finished in a window, for it to be judged at all
State = Literal["ok", "degraded", "unknown"]


def look_level(look: int, alpha: float = 1 - stats.LEVEL) -> float:
    """The confidence of the `look`-th look (1-based): every look's miss sums to at most `alpha`."""
    return 1 - alpha * 6 / (math.pi**2 * max(look, 1) ** 2)


@dataclass(frozen=True)
class Expectation:
    """What the release should do: the profile's accept-length gate, the interval its verify measured
    (None: verify skipped, restored unverified, a tune candidate) and the tolerance below it."""

    gate: float | None
    verified_low: float | None
    tolerance: float

    @property
    def floor(self) -> float | None:
        lowered = None if self.verified_low is None else self.verified_low - self.tolerance
        floors = [f for f in (self.gate, lowered) if f is not None]
        return max(floors) if floors else None

    @property
    def against(self) -> str:
        parts = []
        if self.verified_low is not None:
            parts.append(f"its verified lower bound {self.verified_low:.2f} less {self.tolerance:g}")
        else:
            parts.append("no verified interval (judged on the profile's gate alone)")
        if self.gate is not None:
            parts.append(f"the gate {self.gate:g}")
        return "; ".join(parts)


@dataclass(frozen=True)
class WindowVerdict:
    state: State
    look: int  # 0: not a look (unknown)
    interval: stats.Interval | None
    floor: float | None
    against: str
    reason: str

    def to_dict(self) -> dict[str, object]:
        return {
            "state": self.state,
            "look": self.look,
            "interval": self.interval.to_dict() if self.interval else None,
            "floor": self.floor,
            "against": self.against,
            "reason": self.reason,
        }


def judge(window: Window, expect: Expectation, look: int) -> WindowVerdict:
    """The verdict of one window, as the `look`-th look at the release (when it is judged at all)."""

    def unknown(reason: str) -> WindowVerdict:
        return WindowVerdict("unknown", 0, None, expect.floor, expect.against, reason)

    if window.discarded:
        return unknown(f"window discarded: {window.discarded}")
    if not all(math.isfinite(t) and math.isfinite(s) and t >= 0 and s > 0 for t, s in window.pairs):
        return unknown("an observation is not finite or not positive: nothing decided on it")
    if expect.floor is None:
        return unknown("nothing to judge against: no verified interval and no accept-length gate")
    if window.requests < MIN_REQUESTS or len(window.pairs) < stats.MIN_SAMPLES:
        return unknown(
            f"too little traffic: {window.requests} request(s) finished, {len(window.pairs)} observation(s) "
            f"(at least {MIN_REQUESTS} and {stats.MIN_SAMPLES})"
        )
    interval = stats.ratio_interval([t for t, _ in window.pairs], [s for _, s in window.pairs], look_level(look))
    if interval is None:
        return unknown("the observations have no spread to form an interval from")
    if not all(math.isfinite(x) for x in (interval.estimate, interval.low, interval.high)):
        return unknown("the interval is not finite: nothing decided on it")
    if interval.high < expect.floor:
        return WindowVerdict(
            "degraded",
            look,
            interval,
            expect.floor,
            expect.against,
            f"accept length {interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}] is decided below "
            f"{expect.floor:.2f}",
        )
    measured = f"accept length {interval.estimate:.2f} [{interval.low:.2f}, {interval.high:.2f}]"
    return WindowVerdict(
        "ok", look, interval, expect.floor, expect.against, f"{measured} is not below {expect.floor:.2f}"
    )
