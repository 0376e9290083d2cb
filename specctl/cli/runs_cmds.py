"""runs, show, diff: reading the ledger (with a terminal chart and an HTML report of the trend)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specctl.cli._options import JsonOpt, command_output
from specctl.cli._recording import LedgerOpt

if TYPE_CHECKING:
    from specctl.ledger.ledger import Run


def _open(ledger: str | None) -> Any:
    from specctl.ledger.ledger import Ledger, ledger_path  # sqlite3 stays off the path of check and render

    return Ledger(ledger_path(ledger), readonly=True)


def register(app: typer.Typer) -> None:
    for fn in (runs, show, diff):
        app.command(fn.__name__)(fn)


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

    from specctl.cli.charts import html_report, terminal_chart
    from specctl.ledger.history import metrics, trend

    output = command_output(ctx, json_mode)
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

    from specctl.cli.views import stages_view, verdict_view

    output = command_output(ctx, json_mode)
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
    if found.events:
        views.append(stages_view(found.events))
    output.result(found.to_dict(), Group(*views))


def diff(ctx: typer.Context, run_a: Annotated[str, typer.Argument(help="First run id.")],
         run_b: Annotated[str, typer.Argument(help="Second run id.")], ledger: LedgerOpt = None, json_mode: JsonOpt = False) -> None:
    """Two runs side by side: profile fields, capture, rendered commands, host facts, measurements."""
    from rich.console import Group
    from rich.table import Table

    from specctl.ledger.history import run_diff

    output = command_output(ctx, json_mode)
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


