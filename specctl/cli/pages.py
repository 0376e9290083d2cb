"""Pages: the standalone HTML reports specctl writes, each figure inline SVG drawn by plots.py.

A page has no scripts and fetches nothing, so it can be mailed or attached to a ticket:
`runs --plot-file` (each profile's runs, `watch`'s windows, the tune runs listed), `show RUN
--plot-file` (one run: per-point speedup and verify sequence per host, its heat map or its watch
windows) and `tune --html` (the candidates and heat map of the tune just run).
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from specctl.cli import plots

if TYPE_CHECKING:
    from matplotlib.figure import Figure

STYLE = (
    "<style>body{font-family:sans-serif;margin:2em;max-width:60em}figure{margin:0 0 1.5em}"
    "figure svg{max-width:100%;height:auto}table{border-collapse:collapse;margin:0 0 1em}"
    "td,th{border:1px solid #ccc;padding:.3em .6em;text-align:right}</style>"
)


def _page(title: str, parts: Sequence[str]) -> str:
    head = f"<!doctype html><meta charset='utf-8'><title>{html.escape(title)}</title>"
    return "\n".join([head, STYLE, f"<h1>{html.escape(title)}</h1>", *parts]) + "\n"


def _figure(fig: Figure) -> str:
    return f"<figure>{plots.svg(fig)}</figure>"


def runs_page(
    series: Mapping[str, Sequence[Mapping[str, Any]]],
    *,
    windows: Sequence[Mapping[str, Any]] = (),
    tunes: Sequence[Mapping[str, Any]] = (),
) -> str:
    """The ledger's runs: per profile, accept length, throughput and speedup over its runs; then
    `watch`'s windows per profile and host; then each tune run's candidates and heat map."""
    parts = [] if series else ["<p>no measured runs to chart</p>"]
    for profile, points in series.items():
        parts += [f"<h2>{html.escape(profile)}</h2>", _figure(plots.trend_figure(profile, points))]
    parts += watch_section(windows)
    for tune in tunes:
        parts += tune_section(tune)
    return _page("specctl runs: measured over time", parts)


def watch_section(windows: Sequence[Mapping[str, Any]]) -> list[str]:
    """One figure per profile and host of `watch`'s windows (`WatchWindow` rows as dicts)."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for w in windows:
        groups.setdefault((w.get("profile") or "-", w["host"]), []).append(w)
    parts = ["<h2>watch: accept length while serving</h2>"] if groups else []
    for (profile, host), rows in groups.items():
        parts.append(_figure(plots.watch_figure(rows, title=f"watch: {profile} on {host}")))
    return parts


def tune_page(tune: Mapping[str, Any]) -> str:
    """One tune run (`tune --html`)."""
    return _page(f"specctl tune {tune['profile']}", tune_section(tune))


def tune_section(tune: Mapping[str, Any]) -> list[str]:
    """One tune run: every candidate's objective with its interval, requests and outcome, then the heat map."""
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
            f"<tr><th>{e(c['key'])}{' (current)' if c['incumbent'] else ''}</th><td>{_num(c.get('estimate'))}</td>"
            f"<td>[{_num(iv.get('low'))}, {_num(iv.get('high'))}]</td>"
            f"<td>{c['requests']}</td><td>{e(outcome)}</td></tr>"
        )
    return [
        f"<h2>tune {e(str(tune['profile']))} v{tune['version']} on {e(str(tune['host']))} "
        f"(run {e(str(tune['run']))})</h2>",
        f"<p>{e(metric)}; {tune['requests']} requests "
        f"(every candidate to the planned count: {tune['exhaustive_requests']}); "
        f"{e(str(tune.get('level_note', '')))}</p>",
        f"<table><tr><th>candidate</th><th>{e(metric)}</th><th>interval</th><th>requests</th><th>result</th></tr>"
        f"{''.join(rows)}</table>",
        _figure(plots.heat_map_figure(tune)),
    ]


def run_page(run: Mapping[str, Any], hosts: Sequence[Mapping[str, Any]], windows: Sequence[Mapping[str, Any]]) -> str:
    """One run (`show RUN --plot-file`): per host, its operating points' throughput and speedup and
    its verify sequence; a tune run's heat map; a watch run's windows.

    Args:
        run: the run's identity (`id`, `kind`, `profile`, `version`, `status`).
        hosts: per host `host`, `verdict` (as recorded), `sequence` (`verdict.sequence.replay`) and
            `baseline` (the baseline's output throughput per concurrency, or None).
        windows: the watch run's windows (empty for other kinds).
    """
    e = html.escape
    parts = [
        f"<p>{e(run['kind'])} of {e(str(run.get('profile')))} v{run.get('version')}: {e(run['status'])}</p>",
    ]
    for h in hosts:
        verdict = h.get("verdict") or {}
        where = f"{h['host']}, run {run['id']}"
        if verdict.get("candidates") is not None:
            parts += tune_section(verdict)
            continue
        if not verdict.get("points"):
            continue
        parts.append(f"<h2>{e(h['host'])}</h2>")
        parts.append(
            _figure(
                plots.speedup_figure(verdict["points"], title=f"operating points: {where}", baseline=h.get("baseline"))
            )
        )
        if h.get("sequence"):
            parts.append(_figure(plots.sequence_figure(h["sequence"], title=f"verify sequence: {where}")))
        else:
            parts.append("<p>no requests recorded: the verify sequence cannot be replayed</p>")
    parts += watch_section(windows)
    if len(parts) == 1:
        parts.append("<p>this run measured nothing to chart</p>")
    return _page(f"specctl run {run['id']}", parts)


def _num(value: object) -> str:
    return f"{value:.4g}" if isinstance(value, (int, float)) else "-"
