"""Successive elimination: which of several candidates serves an objective best, measured with as
few requests as the data allow. Pure: intervals in, decisions out.

Candidates are measured one at a time. The best so far is the candidate with the highest estimate
among those measured to the planned count. A candidate is looked at after every `batch` requests
from MIN_SAMPLES on, and dropped as soon as its anytime-valid interval (a confidence sequence, so
looking often costs no error) lies entirely below the best's interval; otherwise it is measured
to the planned count and becomes the best if its estimate is higher.

Every interval is taken at 1 - 0.05/K for K candidates (Bonferroni), so the chance that any
interval of the whole search misses its value, and with it that any drop is wrong, stays within 5 %.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from specctl.verdict import stats


def candidate_level(candidates: int) -> float:
    """Each candidate's confidence, so that all candidates together keep stats.LEVEL."""
    return 1 - (1 - stats.LEVEL) / max(candidates, 1)


def below(interval: stats.Interval | None, best: stats.Interval | None) -> bool:
    """Whether `interval` lies entirely below `best` (decided worse); unknown intervals never are."""
    return interval is not None and best is not None and interval.high < best.low


@dataclass(frozen=True)
class Standing:
    """One candidate's outcome: its objective's interval at the requests it used, and whether it was
    dropped as decided worse than the best (or failed before it could be measured)."""

    key: str
    interval: stats.Interval | None
    requests: int
    eliminated: bool
    failed: str | None = None

    @property
    def estimate(self) -> float | None:
        return self.interval.estimate if self.interval else None

    def to_dict(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "interval": self.interval.to_dict() if self.interval else None,
            "requests": self.requests,
            "eliminated": self.eliminated,
            "failed": self.failed,
        }


@dataclass
class Elimination:
    """The state of one search: the candidates settled so far and the best among them.

    Args:
        candidates: how many candidates the search has (K, for the Bonferroni level).
        planned_n: requests a candidate gets when it is not dropped.
        batch: requests between two looks at a candidate's interval (default 4).
        exhaustive: never drop a candidate early (every one measured to `planned_n`, the best by
            its estimate: the design elimination saves requests against).
    """

    candidates: int
    planned_n: int
    batch: int = 4
    exhaustive: bool = False
    standings: list[Standing] = field(default_factory=list)
    best: Standing | None = None

    @property
    def level(self) -> float:
        return candidate_level(self.candidates)

    def looks_at(self, n: int) -> bool:
        """Whether the candidate's interval is looked at after its n-th request."""
        return (
            not self.exhaustive
            and stats.MIN_SAMPLES <= n < self.planned_n
            and (n - stats.MIN_SAMPLES) % self.batch == 0
        )

    def drops(self, interval: stats.Interval | None) -> bool:
        """Whether a candidate with this interval so far is decided worse than the best."""
        return self.best is not None and below(interval, self.best.interval)

    def settle(self, key: str, interval: stats.Interval | None, requests: int, *, dropped: bool = False) -> Standing:
        """A candidate measured (to the planned count, or `dropped` at a look): record it, and make it
        the best when it was not decided worse and its estimate is higher. A drop stands even when
        the requests still in flight at that look move the final interval: the decision was made at
        the look, where the anytime-valid interval is valid."""
        standing = Standing(key, interval, requests, not self.exhaustive and (dropped or self.drops(interval)))
        self.standings.append(standing)
        if (
            not standing.eliminated
            and interval is not None
            and (self.best is None or self.best.interval is None or interval.estimate > self.best.interval.estimate)
        ):
            self.best = standing
        return standing

    def fail(self, key: str, reason: str) -> Standing:
        """A candidate that could not be measured (its server did not start): never the best."""
        standing = Standing(key, None, 0, False, reason)
        self.standings.append(standing)
        return standing

    @property
    def requests(self) -> int:
        return sum(s.requests for s in self.standings)


Pairs = Sequence[tuple[float, float]]  # one (numerator, denominator) per request, e.g. (tokens, seconds)


def replay(candidates: Sequence[tuple[str, Pairs]], *, planned_n: int, batch: int = 4) -> Elimination:
    """The search run on recorded requests, candidate by candidate, as the live search runs it: each
    candidate's requests are taken in order until it is dropped or reaches `planned_n`."""
    search = Elimination(len(candidates), planned_n, batch)
    for key, pairs in candidates:
        used = list(pairs[:planned_n])

        def interval(n: int, used: Pairs = used) -> stats.Interval | None:
            return stats.ratio_sequence(
                [p[0] for p in used[:n]], [p[1] for p in used[:n]], planned_n=planned_n, level=search.level
            )

        n = next((n for n in range(1, len(used)) if search.looks_at(n) and search.drops(interval(n))), len(used))
        search.settle(key, interval(n), n, dropped=n < len(used))
    return search
