"""Charts of measured values over time: sparklines for the terminal and a standalone HTML report."""

from __future__ import annotations

import html
from typing import Any

BARS = " ▁▂▃▄▅▆▇█"


def _spark(values: list[float | None]) -> str:
    known = [v for v in values if v is not None]
    if not known:
        return ""
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    return "".join("·" if v is None else BARS[1 + round((v - low) / span * (len(BARS) - 2))] for v in values)


def terminal_chart(series: dict[str, list[dict[str, Any]]]) -> str:
    if not series:
        return "no measured runs to chart"
    lines = []
    for profile, points in series.items():
        for key, label in (("accept_length", "accept length"), ("output_tokens_per_s", "output tok/s")):
            values = [p[key] for p in points]
            known = [v for v in values if v is not None]
            rng = f"{min(known):.3g} .. {max(known):.3g}" if known else "-"
            lines.append(f"{profile:<24} {label:<14} {_spark(values)}  ({rng}; {len(points)} runs, "
                         f"v{points[0]['version']} .. v{points[-1]['version']})")
    return "\n".join(lines)


def html_report(series: dict[str, list[dict[str, Any]]]) -> str:
    """A standalone HTML page: one SVG line chart per profile and metric, no scripts, no downloads."""
    parts = ["<!doctype html><meta charset='utf-8'><title>specctl runs</title>",
             "<style>body{font-family:sans-serif;margin:2em}svg{border:1px solid #ccc;margin:0 1em 1em 0}</style>",
             "<h1>specctl: accept length and throughput over time</h1>"]
    for profile, points in series.items():
        parts.append(f"<h2>{html.escape(profile)}</h2>")
        for key, label in (("accept_length", "accept length"), ("output_tokens_per_s", "output tokens/s")):
            parts.append(_svg(label, [(p["run"], p["version"], p[key]) for p in points]))
    return "\n".join(parts) + "\n"


def _svg(label: str, points: list[tuple[str, int, float | None]]) -> str:
    width, height, pad = 480, 200, 30
    known = [v for _, _, v in points if v is not None]
    if not known:
        return f"<p>{html.escape(label)}: no data</p>"
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    step = (width - 2 * pad) / max(1, len(points) - 1)
    xy = [(pad + i * step, height - pad - (v - low) / span * (height - 2 * pad), run, version, v)
          for i, (run, version, v) in enumerate(points) if v is not None]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y, *_ in xy)
    dots = "".join(f"<circle cx='{x:.1f}' cy='{y:.1f}' r='4'><title>{html.escape(run)} v{version}: {v:.4g}</title></circle>"
                   for x, y, run, version, v in xy)
    return (f"<svg width='{width}' height='{height}' role='img' aria-label='{html.escape(label)}'>"
            f"<text x='{pad}' y='18'>{html.escape(label)} ({low:.3g} .. {high:.3g})</text>"
            f"<polyline fill='none' stroke='#36c' stroke-width='2' points='{path}'/>{dots}</svg>")
