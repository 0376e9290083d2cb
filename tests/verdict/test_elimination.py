"""Successive elimination on synthetic requests: a clearly worse candidate is dropped early, an
equal one is measured to the end, the best is kept; the level is shared among the candidates."""

from __future__ import annotations

import random

from specctl.verdict import stats
from specctl.verdict.elimination import Elimination, below, candidate_level, replay

PLANNED = 48


def requests(rate: float, n: int = PLANNED, *, seed: int) -> list[tuple[float, float]]:
    """(tokens, seconds) per request around `rate` tokens/s, with a request-to-request spread of about 5 %."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        tokens = float(rng.randint(48, 64))
        out.append((tokens, tokens / (rate * rng.uniform(0.93, 1.07))))
    return out


def test_a_clearly_worse_candidate_is_dropped_early_and_the_best_kept() -> None:
    search = replay(
        [("good", requests(600, seed=1)), ("bad", requests(400, seed=2)), ("worse", requests(300, seed=3))],
        planned_n=PLANNED,
    )
    good, bad, worse = search.standings
    assert search.best is good and not good.eliminated and good.requests == PLANNED
    assert bad.eliminated and bad.requests == stats.MIN_SAMPLES  # decided at the first look
    assert worse.eliminated and worse.requests == stats.MIN_SAMPLES
    assert search.requests == PLANNED + 2 * stats.MIN_SAMPLES


def test_an_equal_candidate_is_not_dropped() -> None:
    search = replay([("a", requests(600, seed=4)), ("b", requests(600, seed=5))], planned_n=PLANNED)
    a, b = search.standings
    assert not b.eliminated and b.requests == PLANNED
    assert search.best in (a, b)
    assert search.best is (b if (b.estimate or 0) > (a.estimate or 0) else a)


def test_a_better_candidate_after_the_incumbent_becomes_the_best() -> None:
    search = replay([("incumbent", requests(400, seed=6)), ("better", requests(600, seed=7))], planned_n=PLANNED)
    incumbent, better = search.standings
    assert not incumbent.eliminated and not better.eliminated and better.requests == PLANNED
    assert search.best is better


def test_exhaustive_measures_everyone_to_the_planned_count() -> None:
    search = Elimination(2, PLANNED, exhaustive=True)
    assert not any(search.looks_at(n) for n in range(1, PLANNED + 1))
    good = stats.Interval(600, 580, 620, PLANNED, "sequential")
    search.settle("good", good, PLANNED)
    bad = search.settle("bad", stats.Interval(400, 380, 420, PLANNED, "sequential"), PLANNED)
    assert not bad.eliminated and search.best is not None and search.best.key == "good"


def test_looks_come_in_batches_from_the_minimum_sample_on() -> None:
    search = Elimination(3, 24, batch=4)
    assert [n for n in range(1, 25) if search.looks_at(n)] == [8, 12, 16, 20]  # at 24 it is measured to the end anyway


def test_a_failed_candidate_is_never_the_best() -> None:
    search = Elimination(2, PLANNED)
    search.fail("broken", "did not start")
    kept = search.settle("ok", stats.Interval(500, 480, 520, PLANNED, "sequential"), PLANNED)
    assert search.best is kept and search.standings[0].failed == "did not start"


def test_the_level_is_shared_among_the_candidates() -> None:
    assert candidate_level(1) == stats.LEVEL
    assert abs(candidate_level(5) - (1 - 0.05 / 5)) < 1e-12
    wide = stats.Interval(500, 400, 600, 8, "sequential")
    assert not below(wide, stats.Interval(550, 450, 650, 8, "sequential"))  # overlapping: undecided
    assert below(stats.Interval(300, 280, 320, 8, "sequential"), wide)
    assert not below(None, wide) and not below(wide, None)


def test_a_drop_stands_when_requests_in_flight_at_the_look_move_the_final_interval() -> None:
    """At concurrency c a dropped candidate's last c - 1 requests still come back after the look; its
    interval over all of them may no longer lie below the best's, but the decision was the look's."""
    search = Elimination(2, PLANNED, 4)
    good = requests(600, seed=6)
    search.settle(
        "good",
        stats.ratio_sequence([t for t, _ in good], [s for _, s in good], planned_n=PLANNED, level=search.level),
        PLANNED,
    )
    close = requests(598, n=11, seed=7)  # as good as the best, on the whole: not below it
    interval = stats.ratio_sequence([t for t, _ in close], [s for _, s in close], planned_n=PLANNED, level=search.level)
    assert not search.drops(interval)
    standing = search.settle("close", interval, 11, dropped=True)
    assert standing.eliminated and search.best is not None and search.best.key == "good"
