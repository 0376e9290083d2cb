"""Charts of measured values over time: sparklines for the terminal and a standalone HTML report."""

from __future__ import annotations

import html
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


def html_report(
    series: dict[str, list[dict[str, Any]]],
    tunes: Sequence[Mapping[str, Any]] = (),
    windows: Sequence[Mapping[str, Any]] = (),
) -> str:
    """A standalone HTML page: one SVG line chart per profile and metric, no scripts, no downloads;
    then `watch`'s windows per host and release against the band they are held to; then, for each
    tune run given (its `tune --json` data), its candidates and heat map."""
    parts = [
        "<!doctype html><meta charset='utf-8'><title>specctl runs</title>",
        _STYLE,
        "<h1>specctl: accept length and throughput over time</h1>",
    ]
    for profile, points in series.items():
        parts.append(f"<h2>{html.escape(profile)}</h2>")
        for key, label in _lines(points):
            parts.append(_svg(label, [(p["run"], p["version"], p.get(key)) for p in points]))
    parts += watch_section(windows)
    parts += [tune_section(t) for t in tunes]
    return "\n".join(parts) + "\n"


def watch_section(windows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One chart per profile, host and release: each judged window's accept length with its interval,
    the verified lower bound and the floor a window must stay above (`WatchWindow` rows as dicts)."""
    groups: dict[tuple[str, str, str], list[Mapping[str, Any]]] = {}
    for w in windows:
        groups.setdefault((w.get("profile") or "-", w["host"], w["release"]), []).append(w)
    if not groups:
        return []
    parts = ["<h2>watch: accept length while serving</h2>"]
    for (profile, host, release), rows in groups.items():
        parts.append(f"<h3>{html.escape(profile)} on {html.escape(host)}, release {html.escape(release)}</h3>")
        parts.append(_band_svg(rows))
    return parts


def _band_svg(rows: Sequence[Mapping[str, Any]]) -> str:
    width, height, pad = 560, 220, 34
    expected = (rows[-1].get("detail") or {}).get("expected") or {}
    lines = {"floor": rows[-1].get("floor"), "verified": expected.get("verified_low")}
    values = [v for r in rows for v in (r.get("low"), r.get("high")) if v is not None]
    values += [v for v in lines.values() if v is not None]
    if not values:
        return "<p>no judged window</p>"
    low, high = min(values), max(values)
    span = (high - low) or 1.0
    step = (width - 2 * pad) / max(1, len(rows) - 1)

    def y(v: float) -> float:
        return float(height - pad - (v - low) / span * (height - 2 * pad))

    marks = []
    for i, r in enumerate(rows):
        x = pad + i * step
        colour = {"ok": "#396", "degraded": "#c33"}.get(r["state"], "#999")
        tip = html.escape(f"{r['ended_at']}: {r['state']}" + (f" {r['estimate']:.3g}" if r.get("estimate") else ""))
        if r.get("low") is not None and r.get("high") is not None:
            marks.append(
                f"<line x1='{x:.1f}' x2='{x:.1f}' y1='{y(r['low']):.1f}' y2='{y(r['high']):.1f}' stroke='{colour}'/>"
            )
        if r.get("estimate") is not None:
            marks.append(
                f"<circle cx='{x:.1f}' cy='{y(r['estimate']):.1f}' r='4' fill='{colour}'><title>{tip}</title></circle>"
            )
        else:
            marks.append(f"<text x='{x:.1f}' y='{height - 8}' fill='#999'>?<title>{tip}</title></text>")
    for name, value in lines.items():
        if value is not None:
            marks.append(
                f"<line x1='{pad}' x2='{width - pad}' y1='{y(value):.1f}' y2='{y(value):.1f}' stroke='#888' "
                f"stroke-dasharray='{'4 3' if name == 'floor' else '1 0'}'><title>{name} {value:.3g}</title></line>"
            )
    label = f"accept length per window ({low:.3g} .. {high:.3g}); grey: verified lower bound, dashed: floor"
    return (
        f"<svg width='{width}' height='{height}' role='img' aria-label='watch windows'>"
        f"<text x='{pad}' y='18'>{html.escape(label)}</text>{''.join(marks)}</svg>"
    )


_STYLE = (
    "<style>body{font-family:sans-serif;margin:2em}svg{border:1px solid #ccc;margin:0 1em 1em 0}"
    "table{border-collapse:collapse;margin:0 0 1em}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}</style>"
)


def tune_report(tune: Mapping[str, Any]) -> str:
    """A standalone HTML page of one tune run (`specctl tune --html`)."""
    return (
        "\n".join(["<!doctype html><meta charset='utf-8'><title>specctl tune</title>", _STYLE, tune_section(tune)])
        + "\n"
    )


def tune_section(tune: Mapping[str, Any]) -> str:
    """One tune run: every candidate's objective, interval, requests and outcome, and the heat map
    of the objective over num_steps and the other setting that varied (darker: higher)."""
    e = html.escape
    objective = tune["objective"]
    metric = f"{objective['metric']} @ concurrency {objective['concurrency']}"
    rows = []
    for c in tune["candidates"]:
        iv = c.get("interval") or {}
        outcome = (
            "winner"
            if c["winner"]
            else f"failed: {c['failed']}"
            if c["failed"]
            else "eliminated"
            if c["eliminated"]
            else "kept"
        )
        rows.append(
            f"<tr><th>{e(c['key'])}{' (current)' if c['incumbent'] else ''}</th><td>{_fmt(c.get('estimate'))}</td>"
            f"<td>[{_fmt(iv.get('low'))}, {_fmt(iv.get('high'))}]</td>"
            f"<td>{c['requests']}</td><td>{e(outcome)}</td></tr>"
        )
    heat = tune["heat_map"]
    values = [v for row in heat["cells"] for v in row if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    cells = []
    for steps, row in zip(heat["row_values"], heat["cells"], strict=True):
        tds = "".join(
            "<td>-</td>"
            if v is None
            else f"<td style='background:rgba(30,140,60,{0.15 + 0.85 * (v - low) / ((high - low) or 1.0):.2f})'>"
            f"{_fmt(v)}</td>"
            for v in row
        )
        cells.append(f"<tr><th>{e(str(steps))}</th>{tds}</tr>")
    head = "".join(f"<th>{e(str(c))}</th>" for c in heat["column_values"])
    return "\n".join(
        [
            f"<h2>tune {e(str(tune['profile']))} v{tune['version']} on {e(str(tune['host']))} "
            f"(run {e(str(tune['run']))})</h2>",
            f"<p>{e(metric)}; {tune['requests']} requests "
            f"(every candidate to the planned count: {tune['exhaustive_requests']}); "
            f"{e(str(tune.get('level_note', '')))}</p>",
            f"<table><tr><th>candidate</th><th>{e(metric)}</th><th>interval</th><th>requests</th><th>result</th></tr>"
            f"{''.join(rows)}</table>",
            f"<table aria-label='heat map'><tr><th>num_steps \\ {e(str(heat['columns']))}</th>{head}</tr>"
            f"{''.join(cells)}</table>",
        ]
    )


def _fmt(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"


def _svg(label: str, points: list[tuple[str, int, float | None]]) -> str:
    width, height, pad = 480, 200, 30
    known = [v for _, _, v in points if v is not None]
    if not known:
        return f"<p>{html.escape(label)}: no data</p>"
    low, high = min(known), max(known)
    span = (high - low) or 1.0
    step = (width - 2 * pad) / max(1, len(points) - 1)
    xy = [
        (pad + i * step, height - pad - (v - low) / span * (height - 2 * pad), run, version, v)
        for i, (run, version, v) in enumerate(points)
        if v is not None
    ]
    path = " ".join(f"{x:.1f},{y:.1f}" for x, y, *_ in xy)
    dots = "".join(
        f"<circle cx='{x:.1f}' cy='{y:.1f}' r='4'><title>{html.escape(run)} v{version}: {v:.4g}</title></circle>"
        for x, y, run, version, v in xy
    )
    return (
        f"<svg width='{width}' height='{height}' role='img' aria-label='{html.escape(label)}'>"
        f"<text x='{pad}' y='18'>{html.escape(label)} ({low:.3g} .. {high:.3g})</text>"
        f"<polyline fill='none' stroke='#36c' stroke-width='2' points='{path}'/>{dots}</svg>"
    )
