"""runs, show, diff: reading the ledger (with a terminal chart and an HTML report of the trend)."""

from __future__ import annotations

import html
import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specctl.cli._options import JsonOpt
from specctl.cli._recording import LedgerOpt
from specctl.cli.hosts_cmds import _output

if TYPE_CHECKING:
    from specctl.ledger.ledger import Run


def _open(ledger: str | None) -> Any:
    from specctl.ledger.ledger import Ledger, ledger_path  # sqlite3 stays off the path of check and render

    return Ledger(ledger_path(ledger))


def register(app: typer.Typer) -> None:
    for fn in (runs, show, diff):
        app.command(fn.__name__)(fn)


def metrics(run: Run) -> dict[str, float | None]:
    """The headline numbers of a run: from its first host that measured something."""
    out: dict[str, float | None] = {"accept_length": None, "acceptance_rate": None, "decode_tokens_per_s": None,
                                    "speedup": None, "ttft_s": None}
    for record in run.host_records:
        summary = (record.verdict or {}).get("summary") or {}
        if summary:
            for key in out:
                value = summary.get(key)
                out[key] = value.get("estimate") if isinstance(value, dict) else None
            break
    return out


def _fmt(value: float | None, digits: int = 3) -> str:
    return "-" if value is None else f"{value:.{digits}g}"


def runs(ctx: typer.Context,
         profile: Annotated[str | None, typer.Option("--profile", help="Only this profile (name).")] = None,
         host: Annotated[str | None, typer.Option("--host", help="Only runs on this host.")] = None,
         kind: Annotated[str | None, typer.Option("--kind", help="deploy, verify, baseline, rollback or unlock.")] = None,
         limit: Annotated[int, typer.Option("--limit", help="The newest N runs.")] = 50,
         plot: Annotated[bool, typer.Option("--plot", help="Chart accept length and throughput over time, per profile.")] = False,
         plot_file: Annotated[Path | None, typer.Option("--plot-file", help="Also write the chart as an HTML report.")] = None,
         ledger: LedgerOpt = None, json_mode: JsonOpt = False) -> None:
    """The ledger's runs, oldest first."""
    from rich.table import Table

    output = _output(ctx, json_mode)
    book = _open(ledger)
    try:
        found = book.runs(profile=profile, host=host, kind=kind, limit=limit)
    finally:
        book.close()
    if plot or plot_file:
        series = trend(found)
        if plot_file:
            plot_file.write_text(html_report(series))
        output.result({"series": series, **({"report": str(plot_file)} if plot_file else {})}, terminal_chart(series))
        return
    table = Table("run", "kind", "profile", "hosts", "status", "verdict", "accept len", "tok/s", "speedup", "started",
                  title=f"runs ({book.path})", title_justify="left")
    for r in found:
        m = metrics(r)
        verdict = "-" if r.passed is None else ("pass" if r.passed else "FAIL")
        table.add_row(r.id, r.kind + (f" <- {r.parent}" if r.parent else ""), f"{r.profile} v{r.profile_version}" if r.profile else "-",
                      ",".join(r.hosts), r.status, verdict, _fmt(m["accept_length"]), _fmt(m["decode_tokens_per_s"], 4),
                      _fmt(m["speedup"]), r.started_at[:19].replace("T", " "))
    output.result({"runs": [{**_brief(r), **metrics(r)} for r in found]}, table)


def _brief(r: Run) -> dict[str, Any]:
    return {"id": r.id, "kind": r.kind, "profile": r.profile, "version": r.profile_version, "hosts": r.hosts, "status": r.status,
            "passed": r.passed, "parent": r.parent, "started_at": r.started_at, "finished_at": r.finished_at}


def show(ctx: typer.Context, run: Annotated[str, typer.Argument(help="Run id (or a unique prefix).")],
         ledger: LedgerOpt = None, json_mode: JsonOpt = False) -> None:
    """One run, whole: inputs, command, hosts with their facts, commands, measurements and verdicts."""
    from rich.console import Group
    from rich.pretty import Pretty

    from specctl.cli.views import verdict_view

    output = _output(ctx, json_mode)
    book = _open(ledger)
    try:
        found = book.get(run)
    finally:
        book.close()
    head = (f"{found.id}  {found.kind}  {found.profile} v{found.profile_version}  {found.status}\n"
            f"  by {found.user}@{found.machine}: {found.command}\n  {found.started_at} .. {found.finished_at or 'running'}"
            + (f"\n  reason: {found.reason}" if found.reason else "") + (f"\n  parent: {found.parent}" if found.parent else ""))
    views: list[Any] = [head]
    for record in found.host_records:
        if record.verdict and record.verdict.get("gates") is not None:
            views.append(verdict_view(record.host, record.verdict))
        else:
            views.append(Pretty({"host": record.host, "release": record.release, "verdict": record.verdict}))
    output.result(found.to_dict(), Group(*views))


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (lists stay whole: a list of ids is one value)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def run_diff(a: Run, b: Run) -> dict[str, list[dict[str, Any]]]:
    """Profile fields, rendered commands, host facts and measurements where the two runs differ."""
    def rows(left: dict[str, Any], right: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"field": k, "a": left.get(k), "b": right.get(k)} for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k)]

    def first(run: Run, attr: str) -> Any:
        return next((getattr(h, attr) for h in run.host_records if getattr(h, attr)), None)

    commands = []
    for i, (ca, cb) in enumerate(zip(first(a, "commands") or [], first(b, "commands") or [], strict=False)):
        if ca != cb:
            commands.append({"node": i, "a": ca, "b": cb, "changed": _argv_changes(ca, cb)})
    skip = ("host", "disk_free_gib", "port_free")
    return {
        "profile": rows(flatten(a.inputs.get("profile") or {}), flatten(b.inputs.get("profile") or {})),
        "capture": rows(flatten(a.inputs.get("capture") or {}), flatten(b.inputs.get("capture") or {})),
        "commands": commands,
        "facts": [r for r in rows(flatten(first(a, "facts") or {}), flatten(first(b, "facts") or {})) if r["field"] not in skip],
        "measurements": [{"field": k, "a": metrics(a)[k], "b": metrics(b)[k]} for k in metrics(a)],
    }


def _argv_changes(a: list[str], b: list[str]) -> list[str]:
    import difflib

    return [line for line in difflib.ndiff(a, b) if line[:1] in "+-"]


def diff(ctx: typer.Context, run_a: Annotated[str, typer.Argument(help="First run id.")],
         run_b: Annotated[str, typer.Argument(help="Second run id.")], ledger: LedgerOpt = None, json_mode: JsonOpt = False) -> None:
    """Two runs side by side: profile fields, capture, rendered commands, host facts, measurements."""
    from rich.console import Group
    from rich.table import Table

    output = _output(ctx, json_mode)
    book = _open(ledger)
    try:
        a, b = book.get(run_a), book.get(run_b)
    finally:
        book.close()
    changes = run_diff(a, b)
    views: list[Any] = []
    for section in ("profile", "capture", "facts", "measurements"):
        table = Table("field", a.id, b.id, title=section, title_justify="left")
        for row in changes[section]:
            table.add_row(row["field"], json.dumps(row["a"]), json.dumps(row["b"]))
        views.append(table if changes[section] else f"{section}: no difference")
    for c in changes["commands"]:
        views.append(f"command, node {c['node']}:\n  " + "\n  ".join(c["changed"]))
    if not changes["commands"]:
        views.append("commands: no difference")
    output.result({"a": a.id, "b": b.id, **changes}, Group(*views))


# --- trend -------------------------------------------------------------------------------------------
def trend(found: list[Run]) -> dict[str, list[dict[str, Any]]]:
    """Per profile, the runs that measured something: time, run, version, accept length, throughput."""
    series: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        m = metrics(r)
        if r.profile and r.kind != "baseline" and (m["accept_length"] is not None or m["decode_tokens_per_s"] is not None):
            series.setdefault(r.profile, []).append({"run": r.id, "at": r.started_at, "version": r.profile_version,
                                                     "accept_length": m["accept_length"], "decode_tokens_per_s": m["decode_tokens_per_s"]})
    return series


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
        for key, label in (("accept_length", "accept length"), ("decode_tokens_per_s", "decode tok/s")):
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
        for key, label in (("accept_length", "accept length"), ("decode_tokens_per_s", "decode tokens/s")):
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
