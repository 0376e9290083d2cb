"""Prometheus' text exposition format (0.0.4), as an engine's `/metrics` answers it: pure parsing.

Only what `watch` reads is kept: each sample's name, labels and value. Comments (`# HELP`, `# TYPE`)
are skipped; label values are unescaped (`\\\\`, `\\"`, `\\n`); values are Go floats (`3.0`, `NaN`,
`+Inf`, `1.2e+08`); an optional timestamp after the value is ignored. A line that is none of these
is an error naming its number, never skipped in silence: a window judged on half a page is wrong.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

__all__ = ["MetricsError", "Sample", "mean", "parse", "total"]


class MetricsError(ValueError):
    """The text is not the exposition format."""


@dataclass(frozen=True)
class Sample:
    name: str
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def parse(text: str) -> list[Sample]:
    samples = []
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        try:
            samples.append(_sample(line))
        except (ValueError, IndexError) as exc:
            raise MetricsError(f"line {number}: {exc}: {raw[:120]!r}") from None
    return samples


def _sample(line: str) -> Sample:
    brace = line.find("{")
    space = line.find(" ")
    if brace != -1 and (space == -1 or brace < space):
        name = line[:brace]
        labels, rest = _labels(line, brace + 1)
    else:
        name, _, rest = line.partition(" ")
        labels = ()
    if not name:
        raise ValueError("no metric name")
    fields = rest.split()
    if not fields:
        raise ValueError("no value")
    return Sample(name, labels, _value(fields[0]))


def _labels(line: str, at: int) -> tuple[tuple[tuple[str, str], ...], str]:
    """The labels from `at` (just past `{`) to the closing brace, and the text after it."""
    pairs: list[tuple[str, str]] = []
    while True:
        while line[at] in " ,":
            at += 1
        if line[at] == "}":
            return tuple(pairs), line[at + 1 :]
        equals = line.index("=", at)
        key = line[at:equals].strip()
        if line[equals + 1] != '"':
            raise ValueError(f"label {key} has no quoted value")
        value, at = _quoted(line, equals + 2)
        pairs.append((key, value))


def _quoted(line: str, at: int) -> tuple[str, int]:
    out = []
    while line[at] != '"':
        if line[at] == "\\":
            at += 1
            out.append({"n": "\n", "\\": "\\", '"': '"'}.get(line[at], "\\" + line[at]))
        else:
            out.append(line[at])
        at += 1
    return "".join(out), at + 1


def _value(text: str) -> float:
    special = {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf, "Inf": math.inf}
    return special[text] if text in special else float(text)


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
