"""Plots: the figures of specctl's HTML reports, drawn with matplotlib from what the ledger holds.

Each function takes plain data (a verdict's points, `trend`'s series, a tune run, `watch`'s windows,
a replayed verify sequence) and returns a matplotlib Figure with a title, axis labels with their
units, a legend, every measured value with its interval, and what it is compared with: the gate,
the baseline (1.0x), the verified interval, the floor. `svg` renders a figure as standalone SVG for
a page (pages.py). matplotlib is an optional extra (`pip install 'specctl[plots]'`), imported here
only, when a chart is asked for: a command calls `require()` before any work, so a missing
matplotlib is said at once, not after a measurement.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from specctl.errors import InputError

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

INSTALL = "pip install 'specctl[plots]'"

# every measured figure by its ledger key, named with its unit
LABELS = {
    "accept_length": "accept length (tokens per verify step)",
    "output_tokens_per_s": "output throughput (tok/s)",
    "decode_tokens_per_s": "decode throughput (tok/s)",
    "speedup": "speedup (x baseline output throughput)",
    "ttft_s": "time to first token (s)",
}
KNOBS = {
    "num_steps": "num_steps (draft steps per verify)",
    "eagle_topk": "eagle_topk (branches per draft step)",
    "num_draft_tokens": "num_draft_tokens (draft tokens per verify)",
    "adaptive": "adaptive (sglang's adaptive speculation tiers)",
}
CONCURRENCY = "concurrency (requests in flight)"
REQUESTS = "requests measured"
TIME = "time (UTC)"
RUNS = "run, oldest first (profile version, start time UTC)"
# how the heat map marks a cell's candidates (colours that show on the colour map and on white)
MARKS: dict[str, dict[str, Any]] = {
    "winner": {"marker": "*", "markersize": 16, "color": "gold", "markeredgecolor": "black"},
    "eliminated": {"marker": "x", "markersize": 9, "markeredgewidth": 2, "color": "#d62728"},
    "current settings": {
        "marker": "o",
        "markersize": 10,
        "markeredgewidth": 2,
        "fillstyle": "none",
        "color": "#ff7f0e",
    },
}
GATE_COLOUR, BASELINE_COLOUR, DEGRADED_COLOUR, UNKNOWN_COLOUR = "#c0392b", "#555555", "#d62728", "#999999"


def require() -> None:
    """Fail with the command to run when matplotlib is not installed (before any work is done)."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as exc:
        raise InputError("charts need matplotlib, which is not installed", fix=INSTALL) from exc


def _figure(rows: int = 1, cols: int = 1, *, height: float = 3.4, width: float = 7.5) -> tuple[Figure, list[Axes]]:
    require()
    from matplotlib.figure import Figure  # no pyplot: no global figure registry, no GUI backend

    fig = Figure(figsize=(width, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, [ax for row in axes for ax in row]


def svg(fig: Figure) -> str:
    """The figure as an `<svg>` element: text kept as text (searchable, small), ids and metadata
    fixed, so the same data gives the same bytes."""
    require()
    import matplotlib

    buffer = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "specctl"}):
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": "specctl"})
    text = buffer.getvalue()
    return text[text.index("<svg") :]


def _label(key: str) -> str:
    return LABELS.get(key.split("@")[0], key)


def _time(at: str) -> float:
    from matplotlib.dates import date2num

    return float(date2num(datetime.fromisoformat(at)))  # type: ignore[no-untyped-call]  # matplotlib.dates is unannotated


def _time_axis(ax: Axes) -> None:
    from datetime import UTC

    from matplotlib.dates import AutoDateLocator, ConciseDateFormatter

    # matplotlib.dates is unannotated
    locator = AutoDateLocator(tz=UTC)  # type: ignore[no-untyped-call]
    ax.xaxis.set_major_locator(locator)
    ax.xaxis.set_major_formatter(ConciseDateFormatter(locator, tz=UTC))  # type: ignore[no-untyped-call]
    ax.set_xlabel(TIME)


def _bars(estimates: Sequence[float], lows: Sequence[float], highs: Sequence[float]) -> list[list[float]]:
    """errorbar's yerr: distances below and above each estimate (an unbounded side drawn to 3x the estimate)."""
    capped = [h if math.isfinite(h) else 3 * e for e, h in zip(estimates, highs, strict=True)]
    return [
        [e - lo for e, lo in zip(estimates, lows, strict=True)],
        [h - e for e, h in zip(estimates, capped, strict=True)],
    ]


def _interval_series(
    ax: Axes,
    xs: Sequence[float],
    values: Sequence[Mapping[str, Any] | None],
    *,
    label: str,
    color: str,
    marker: str = "o",
) -> None:
    """Estimates with their intervals as error bars; an estimate without one as a hollow marker."""
    with_iv = [(x, v) for x, v in zip(xs, values, strict=True) if v and v.get("low") is not None]
    bare = [(x, v) for x, v in zip(xs, values, strict=True) if v and v.get("low") is None]
    if with_iv:
        est = [float(v["estimate"]) for _, v in with_iv]
        ax.errorbar(
            [x for x, _ in with_iv],
            est,
            yerr=_bars(est, [float(v["low"]) for _, v in with_iv], [float(v["high"]) for _, v in with_iv]),
            fmt=marker,
            capsize=4,
            color=color,
            label=f"{label}, with interval",
        )
    if bare:
        ax.plot(
            [x for x, _ in bare],
            [float(v["estimate"]) for _, v in bare],
            marker=marker,
            linestyle="none",
            fillstyle="none",
            color=color,
            label=f"{label}, no interval (too few requests)",
        )


def speedup_figure(
    points: Sequence[Mapping[str, Any]], *, title: str, baseline: Mapping[int, Any] | None = None
) -> Figure:
    """Per operating point: output throughput beside the baseline's, and the speedup with its
    interval against 1.0x (the target alone) and the `min_speedup` gate.

    Args:
        points: a verdict's `points` (each `concurrency`, `summary`, `gates`).
        title: what run and host these are.
        baseline: the baseline's output throughput per concurrency (`{"estimate", "low", "high"}`), when known.
    """
    fig, (tput, ax) = _figure(2, 1, height=3.0)
    fig.suptitle(title)
    conc = [int(p["concurrency"]) for p in points]
    xs = [float(i) for i in range(len(points))]
    summaries = [p.get("summary") or {} for p in points]
    _interval_series(tput, xs, [s.get("output_tokens_per_s") for s in summaries], label="speculative", color="C0")
    if baseline:
        _interval_series(
            tput,
            [x + 0.08 for x in xs],
            [baseline.get(c) for c in conc],
            label="baseline (target alone)",
            color=BASELINE_COLOUR,
            marker="s",
        )
    tput.set_title("output throughput per operating point")
    tput.set_ylabel(LABELS["output_tokens_per_s"])
    speedups = [s.get("speedup") for s in summaries]
    _interval_series(ax, xs, speedups, label="speedup", color="C1")
    ax.axhline(1.0, color=BASELINE_COLOUR, linestyle="--", label="baseline = 1.0x")
    gates = [_gate_of(p, "speedup") for p in points]
    if any(g is not None for g in gates):
        ax.plot(
            [x for x, g in zip(xs, gates, strict=True) if g is not None],
            [g for g in gates if g is not None],
            linestyle="none",
            marker="_",
            markersize=28,
            markeredgewidth=2,
            color=GATE_COLOUR,
            label="gate (min_speedup)",
        )
    if not any(speedups):
        ax.text(0.5, 0.5, "no baseline measured: speedup unknown", transform=ax.transAxes, ha="center")
    ax.set_title("speedup per operating point")
    ax.set_ylabel(LABELS["speedup"])
    for a in (tput, ax):
        a.set_xticks(xs, [str(c) for c in conc])
        a.set_xlim(-0.5, len(points) - 0.5)
        a.set_xlabel(CONCURRENCY)
        a.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return fig


def _held_to(ax: Axes, xs: Sequence[float], values: Sequence[float | None], *, label: str, color: str) -> None:
    """A threshold that may change from one x to the next (a gate over runs, a floor over windows):
    a dashed step at each x that has one."""
    known = [(x, float(v)) for x, v in zip(xs, values, strict=True) if v is not None]
    if known:
        ax.plot(
            [x for x, _ in known],
            [v for _, v in known],
            drawstyle="steps-post",
            linestyle="--",
            marker="_",
            markersize=14,
            color=color,
            label=label,
        )


def _gate_of(point: Mapping[str, Any], name: str) -> float | None:
    return next((float(g["threshold"]) for g in point.get("gates") or [] if g["name"] == name), None)


def sequence_figure(replayed: Sequence[Mapping[str, Any]], *, title: str) -> Figure:
    """The verify sequence: for each gate (a row) and operating point (a column), the running estimate
    and its confidence sequence after every request, with the gate's threshold, the planned count and
    the interval the verdict recorded (`sequence.replay`'s points)."""
    names = list(dict.fromkeys(g["name"] for p in replayed for g in p["gates"]))
    cols = max(len(replayed), 1)
    fig, axes = _figure(max(len(names), 1), cols, height=3.0, width=max(7.5, 3.4 * cols + 2.5))
    fig.suptitle(title)
    if not names:
        axes[0].text(0.5, 0.5, "no requests recorded", transform=axes[0].transAxes, ha="center")
        return fig
    for row, name in enumerate(names):
        row_axes = axes[row * cols : (row + 1) * cols]
        for ax, point in zip(row_axes, replayed, strict=True):
            g = next((g for g in point["gates"] if g["name"] == name), None)
            if g is not None:
                _sequence(ax, point, g)
            ax.set_title(f"{name} at concurrency {point['concurrency']}", fontsize="medium")
            ax.set_xlabel(REQUESTS)
            ax.set_ylabel(_label(name))
            ax.legend(loc="best", fontsize="x-small")
        for ax in row_axes[1:]:
            ax.sharey(row_axes[0])
    return fig


def _sequence(ax: Axes, point: Mapping[str, Any], g: Mapping[str, Any]) -> None:
    looks = g["looks"]
    n = [float(look["n"]) for look in looks]
    ax.plot(n, [look["estimate"] for look in looks], color="C0", marker=".", label="running estimate")
    ax.fill_between(
        n,
        [look["low"] for look in looks],
        [_capped(look["high"], look["estimate"]) for look in looks],
        color="C0",
        alpha=0.25,
        label=f"confidence sequence ({point['level']:.3g})",
    )
    if g["threshold"] is not None:
        ax.axhline(float(g["threshold"]), color=GATE_COLOUR, linestyle="--", label=f"gate {g['op']} {g['threshold']:g}")
    ax.axvline(float(point["planned"]), color=BASELINE_COLOUR, linestyle=":", label=f"planned: {point['planned']}")
    recorded = g.get("interval")
    if recorded:
        kind = "stopped early" if point["stopped_early"] else "fixed-sample interval"
        ax.errorbar(
            [float(point["requests"])],
            [float(recorded["estimate"])],
            yerr=_bars([recorded["estimate"]], [recorded["low"]], [recorded["high"]]),
            fmt="D",
            capsize=4,
            color="black",
            label=f"verdict ({kind})",
        )


def _capped(high: float, estimate: float) -> float:
    return high if math.isfinite(high) else 3 * estimate


def trend_figure(profile: str, points: Sequence[Mapping[str, Any]]) -> Figure:
    """One profile over its runs: accept length, output throughput and (where a baseline was
    measured) speedup, each with its interval and the gate it was held to; one series per operating
    point when the runs measured several (`history.trend`'s points)."""
    keys = ["accept_length", "output_tokens_per_s"]
    if any(p.get(k) is not None for p in points for k in p if k.split("@")[0] == "speedup"):
        keys.append("speedup")
    fig, axes = _figure(len(keys), 1, height=2.8)
    fig.suptitle(f"{profile}: measured per run")
    at = sorted({int(k.rsplit("@", 1)[1]) for p in points for k in p if "@" in k})
    xs = [float(i) for i in range(len(points))]  # evenly spaced: a deploy and its rollback a minute apart stay apart
    for ax, key in zip(axes, keys, strict=True):
        for i, series in enumerate([f"{key}@{c}" for c in at] or [key]):
            values = [
                {"estimate": p[series], **((p.get("intervals") or {}).get(series) or {})}
                if p.get(series) is not None
                else None
                for p in points
            ]
            where = f" @{series.split('@')[1]}" if "@" in series else ""
            _interval_series(ax, xs, values, label=f"measured{where}", color=f"C{i}")
            gates = [(p.get("gates") or {}).get(series) for p in points]
            _held_to(ax, xs, gates, label=f"gate{where}", color=GATE_COLOUR if not at else f"C{i}")
        if key == "speedup":
            ax.axhline(1.0, color=BASELINE_COLOUR, linestyle=":", label="baseline = 1.0x")
        ax.set_title(_label(key).split(" (")[0])
        ax.set_ylabel(_label(key))
        step = max(1, math.ceil(len(points) / 12))
        ax.set_xticks(xs[::step], [_run_tick(p) for p in points[::step]], fontsize="small")
        ax.set_xlabel(RUNS)
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), fontsize="small")
    return fig


def _run_tick(point: Mapping[str, Any]) -> str:
    at = str(point.get("at") or "")
    return f"v{point.get('version')}\n{at[5:10]} {at[11:16]}"


def heat_map_figure(tune: Mapping[str, Any]) -> Figure:
    """Tune's heat map: the objective over num_steps and the other setting that varied, each cell
    with its estimate and interval; the winner, the eliminated, the failed, the current settings and
    the combinations not measured marked (a tune run's data, as `tune --json` prints it)."""
    import numpy as np
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch, Rectangle

    heat = tune["heat_map"]
    objective = tune["objective"]
    rows, cols = heat["row_values"], heat["column_values"]
    fig, (ax,) = _figure(1, 1, height=max(3.2, 0.9 * len(rows) + 1.6))
    fig.suptitle(f"tune {tune['profile']} v{tune['version']} on {tune['host']}: heat map")
    grid = np.array([[np.nan if v is None else float(v) for v in row] for row in heat["cells"]], dtype=float)
    known = [float(v) for row in heat["cells"] for v in row if v is not None]
    low, high = (min(known), max(known)) if known else (0.0, 1.0)
    image = ax.imshow(np.ma.masked_invalid(grid), cmap="viridis", aspect="auto", origin="lower")
    unit = f"{_label(objective['metric'])} at concurrency {objective['concurrency']}"
    fig.colorbar(image, ax=ax, label=unit)
    cells = _cells(tune["candidates"], heat)
    handles: dict[str, Any] = {}
    for i, steps in enumerate(rows):
        for j, col in enumerate(cols):
            here = cells.get((str(steps), str(col)), [])
            best = max((c for c in here if c.get("estimate") is not None), key=lambda c: c["estimate"], default=None)
            if best is None:
                name = "failed" if any(c.get("failed") for c in here) else "not measured"
                hatch = "xx" if name == "failed" else "//"
                ax.add_patch(Rectangle((j - 0.5, i - 0.5), 1, 1, fill=False, hatch=hatch, edgecolor=UNKNOWN_COLOUR))
                ax.text(j, i, name, ha="center", va="center", fontsize="small")
                handles.setdefault(name, Patch(fill=False, hatch=hatch, edgecolor=UNKNOWN_COLOUR, label=name))
                continue
            iv = best.get("interval") or {}
            text = f"{best['estimate']:.4g}" + (f"\n[{iv['low']:.4g}, {iv['high']:.4g}]" if iv else "")
            light = (best["estimate"] - low) / ((high - low) or 1.0) > 0.6  # viridis is yellow at the top: dark text
            ax.text(j, i, text, ha="center", va="center", fontsize="small", color="black" if light else "white")
            shown = {
                "winner": any(c.get("winner") for c in here),
                "eliminated": all(c.get("eliminated") for c in here),
                "current settings": any(c.get("incumbent") for c in here),
            }
            for offset, name in enumerate(name for name, on in shown.items() if on):
                ax.plot([j - 0.36 + 0.18 * offset], [i + 0.3], linestyle="none", **MARKS[name])
                handles.setdefault(name, Line2D([], [], linestyle="none", label=name, **MARKS[name]))
    ax.set_xticks(range(len(cols)), [str(c) for c in cols])
    ax.set_yticks(range(len(rows)), [str(r) for r in rows])
    ax.set_xlabel(KNOBS.get(heat["columns"], heat["columns"]))
    ax.set_ylabel(KNOBS.get(heat["rows"], heat["rows"]))
    ax.set_title(f"colour: {unit}; cell: estimate [interval]", fontsize="small")
    order = ["winner", "eliminated", "current settings", "not measured", "failed"]
    legend = [handles[k] for k in order if k in handles]
    ax.legend(
        handles=legend or [Patch(color="none", label="no candidate measured")],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.18),
        ncols=3,
        fontsize="small",
    )
    return fig


def _cells(
    candidates: Sequence[Mapping[str, Any]], heat: Mapping[str, Any]
) -> dict[tuple[str, str], list[Mapping[str, Any]]]:
    """The candidates in each cell of the heat map, by (num_steps, column value) as text."""
    out: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for c in candidates:
        s = c.get("speculative") or {}
        out.setdefault((str(s.get(heat["rows"])), str(s.get(heat["columns"]))), []).append(c)
    return out


def watch_figure(windows: Sequence[Mapping[str, Any]], *, title: str) -> Figure:
    """Accept length while serving: each judged window's estimate with its interval, one series per
    release, against the floor it is held to, the verified interval's lower bound and the gate;
    degraded windows marked, windows that could not be judged shown along the bottom
    (`WatchWindow` rows of one host, as dicts)."""
    fig, (ax,) = _figure(1, 1, height=3.6)
    fig.suptitle(title)
    releases: dict[str, list[Mapping[str, Any]]] = {}
    spans: set[str] = set()
    for w in windows:
        releases.setdefault(str(w["release"]), []).append(w)
    for i, (release, rows) in enumerate(releases.items()):
        colour = f"C{i}"
        xs = [_time(r["ended_at"]) for r in rows]
        judged = [(x, r) for x, r in zip(xs, rows, strict=True) if r.get("estimate") is not None]
        ok = [(x, r) for x, r in judged if r["state"] != "degraded"]
        _interval_series(ax, [x for x, _ in ok], [dict(r) for _, r in ok], label=f"release {release}", color=colour)
        degraded = [(x, r) for x, r in judged if r["state"] == "degraded"]
        _interval_series(
            ax,
            [x for x, _ in degraded],
            [dict(r) for _, r in degraded],
            label=f"degraded ({release})",
            color=DEGRADED_COLOUR,
            marker="v",
        )
        _held_to(ax, xs, [r.get("floor") for r in rows], label=f"floor ({release})", color=colour)
        expected = (rows[-1].get("detail") or {}).get("expected") or {}
        span = [_time(rows[0]["started_at"]), _time(rows[-1]["ended_at"])]
        if expected.get("verified_low") is not None:
            ax.plot(
                span, [expected["verified_low"]] * 2, color=BASELINE_COLOUR, label=f"verified lower bound ({release})"
            )
        if expected.get("gate") is not None:
            ax.plot(span, [expected["gate"]] * 2, color=GATE_COLOUR, linestyle=":", label=f"gate ({release})")
        for r in rows:  # a window's whole span, shaded where it was degraded or could not be judged
            if r["state"] == "degraded" or r.get("estimate") is None:
                name = "degraded window" if r["state"] == "degraded" else "window not judged"
                ax.axvspan(
                    _time(r["started_at"]),
                    _time(r["ended_at"]),
                    color=DEGRADED_COLOUR if r["state"] == "degraded" else UNKNOWN_COLOUR,
                    alpha=0.15,
                    label=name if name not in spans else None,
                )
                spans.add(name)
    ax.set_ylabel(LABELS["accept_length"])
    _time_axis(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.02, 1), fontsize="small")
    return fig
