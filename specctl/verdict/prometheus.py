"""An engine's `/metrics` page (Prometheus' text exposition format, 0.0.4), read by prometheus_client's own
parser, and the rules `watch` adds on top of it.

The parser is the well-kept one (`prometheus_client.parser.text_string_to_metric_families`), not ours:
it refuses garbage, HTML and binary pages, unescapes label values and reads Go floats. It takes what the
format allows but a window cannot be judged on: NaN, ±Inf, a negative counter, one series twice on one
page (prometheus_client writes such a page; Prometheus itself refuses the scrape). `duplicate` and
`unusable` name those, and verdict/window.py discards a window that holds one: never summed, never `ok`.

prometheus_client is imported when a page is read, never at start-up (validate, check and render stay
light: tests/test_lightweight.py).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["MetricsError", "Sample", "duplicate", "mean", "parse", "total", "unusable"]


class MetricsError(ValueError):
    """The text is not the exposition format."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)

    def series(self) -> str:
        """The series as a page writes it, without its value: `name{key="value",...}`."""
        shown = ",".join(f'{k}="{v}"' for k, v in self.labels)
        return f"{self.name}{{{shown}}}" if shown else self.name


def parse(text: str) -> list[Sample]:
    """Every sample on the page, in its order. Raises MetricsError, without quoting the page (the
    parser's own message carries the offending line, which may be anything the server sent)."""
    from prometheus_client.parser import text_string_to_metric_families

    try:
        return [
            Sample(s.name, tuple(sorted(s.labels.items())), float(s.value))
            for family in text_string_to_metric_families(text)
            for s in family.samples
        ]
    except (ValueError, TypeError, IndexError, KeyError) as exc:  # what the parser raises on a page it cannot read
        raise MetricsError(f"not the Prometheus text format ({type(exc).__name__})") from None


def duplicate(samples: Iterable[Sample]) -> Sample | None:
    """The first series that appears twice on one page (same name and labels), None when none does:
    a page that says two things of one series cannot be read as either."""
    seen: set[tuple[str, tuple[tuple[str, str], ...]]] = set()
    for s in samples:
        if (s.name, s.labels) in seen:
            return s
        seen.add((s.name, s.labels))
    return None


def unusable(samples: Iterable[Sample], name: str) -> Sample | None:
    """The first series of `name` whose value no window can use (NaN, ±Inf, negative), None when none:
    every series `watch` reads is a count or an accept length, finite and never below 0."""
    return next((s for s in samples if s.name == name and not (math.isfinite(s.value) and s.value >= 0)), None)


def _values(samples: Iterable[Sample], name: str, match: Mapping[str, str] | None) -> list[float]:
    return [s.value for s in samples if s.name == name and all(s.label(k) == v for k, v in (match or {}).items())]


def total(samples: Iterable[Sample], name: str, match: Mapping[str, str] | None = None) -> float | None:
    """The sum of every series of `name` whose labels include `match` (None: the engine has no such
    series): a counter split by `is_streaming`, or one series per data-parallel group."""
    values = _values(samples, name, match)
    return sum(values) if values else None


def mean(samples: Iterable[Sample], name: str, match: Mapping[str, str] | None = None) -> float | None:
    """The mean of a gauge's series (one per data-parallel group), None when there is none."""
    values = _values(samples, name, match)
    return sum(values) / len(values) if values else None
