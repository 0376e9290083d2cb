"""Terminal charts: a sparkline per profile and measured figure over its runs, and per host and release
of `watch`'s windows. They need nothing beyond the standard library; the figures of the HTML
reports are drawn by plots.py (matplotlib) and laid out by pages.py."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

BARS = " ▁▂▃▄▅▆▇█"


def _spark(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    return "".join("·" if v is None else BARS[1 + round((v - low) / span * (len(BARS) - 2))] for v in values)


def _lines(points: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """(key, label) of every series to chart: accept length and output throughput, then, for runs
    that measured several operating points, output throughput and speedup at each."""
    at = sorted({int(k.rsplit("@", 1)[1]) for p in points for k in p if "@" in k})
    return [
        ("accept_length", "accept length"),
        ("output_tokens_per_s", "output tok/s"),
        *(
            (f"{key}@{c}", f"{label} @{c}")
            for c in at
            for key, label in (("output_tokens_per_s", "output tok/s"), ("speedup", "speedup"))
        ),
    ]


def terminal_chart(series: dict[str, list[dict[str, Any]]]) -> str:
    if not series:
        return "no measured runs to chart"
    lines = []
    for profile, points in series.items():
        for key, label in _lines(points):
            values = [p.get(key) for p in points]
            known = [v for v in values if v is not None]
            rng = f"{min(known):.3g} .. {max(known):.3g}" if known else "-"
            lines.append(
                f"{profile:<24} {label:<18} {_spark(values)}  ({rng}; {len(points)} runs, "
                f"v{points[0]['version']} .. v{points[-1]['version']})"
            )
    return "\n".join(lines)


def watch_chart(windows: Sequence[Mapping[str, Any]]) -> str:
    """One sparkline per host and release of `watch`'s judged windows, with the floor they are held to."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for w in windows:
        groups.setdefault((w["host"], w["release"]), []).append(w)
    lines = []
    for (host, release), rows in groups.items():
        values = [r.get("estimate") for r in rows]
        degraded = sum(r["state"] == "degraded" for r in rows)
        floor = rows[-1].get("floor")
        lines.append(
            f"watch {host:<10} {release:<24} {_spark(values)}  ({len(rows)} windows, {degraded} degraded"
            + (f"; floor {floor:.3g})" if floor is not None else ")")
        )
    return "\n".join(lines)
