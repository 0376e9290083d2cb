"""runs, show, diff: reading the ledger (with a terminal chart and an HTML report of the trend)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from specctl.cli._options import InventoryOpt, JsonOpt, LedgerOpt, command_output
from specctl.errors import InputError

if TYPE_CHECKING:
    from specctl.ledger.records import Run


def _open(ledger: str | None) -> Any:
    from specctl.ledger.ledger import Ledger, ledger_path  # sqlite3 stays off the path of check and render

    return Ledger(ledger_path(ledger), readonly=True)


def register(app: typer.Typer) -> None:
    for fn in (runs, show, diff):
        app.command(fn.__name__)(fn)


def runs(
    ctx: typer.Context,
    profile: Annotated[str | None, typer.Option("--profile", help="Only this profile (name).")] = None,
    hosts: Annotated[
        str | None, typer.Option("--hosts", "--host", help="Only runs on these hosts or groups, comma-separated.")
    ] = None,
    kind: Annotated[
        str | None, typer.Option("--kind", help="deploy, verify, baseline, rollback, unlock, tune or stage.")
    ] = None,
    limit: Annotated[int, typer.Option("--limit", help="The newest N runs.")] = 50,
    out: Annotated[
        Literal["normal", "wide", "json"],
        typer.Option("-o", "--output", help="normal: what fits the terminal; wide: every column; json: as --json."),
    ] = "normal",
    plot: Annotated[
        bool, typer.Option("--plot", help="Chart accept length and throughput over time, per profile.")
    ] = False,
    plot_file: Annotated[
        Path | None, typer.Option("--plot-file", help="Also write the chart as an HTML report.")
    ] = None,
    inventory: InventoryOpt = None,
    ledger: LedgerOpt = None,
    json_mode: JsonOpt = False,
) -> None:
    """The ledger's runs, oldest first. The short run ids shown are accepted by show, diff and rollback --to."""
    from datetime import UTC, datetime

    from specctl.cli.charts import html_report, terminal_chart, watch_chart
    from specctl.cli.views import runs_view
    from specctl.ledger.history import brief, metrics, short_ids, trend
    from specctl.ledger.schema import KINDS

    output = command_output(ctx, json_mode or out == "json")
    if kind is not None and kind not in KINDS:
        raise InputError(f"--kind {kind!r} is not a kind of run", fix=f"use one of: {', '.join(KINDS)}")
    names = _host_names(hosts, inventory)
    book = _open(ledger)
    try:
        found = _runs(book, profile=profile, hosts=names, kind=kind, limit=limit)
    finally:
        book.close()
    if plot or plot_file:
        series = trend(found)
        watched = [dataclasses.asdict(w) for w in _windows(ledger, profile, names)]
        if plot_file:
            plot_file.write_text(html_report(series, windows=watched))
        chart = terminal_chart(series) + ("\n" + watch_chart(watched) if watched else "")
        output.result({"series": series, "watch": watched, **({"report": str(plot_file)} if plot_file else {})}, chart)
        return
    rows = [{**brief(r), **metrics(r)} for r in found]
    short = short_ids([r.id for r in found] + [r.parent for r in found if r.parent])
    output.result(
        {"runs": rows},
        runs_view(
            rows,
            title=f"runs ({book.path})",
            wide=out == "wide",
            width=output.out.width,
            now=datetime.now(UTC),
            short=short,
        ),
        fit=out != "wide",
    )


def _windows(ledger: str | None, profile: str | None, hosts: list[str], run_id: str | None = None) -> list[Any]:
    """`watch`'s windows of the profile (every one, when none is named) on the hosts, oldest first."""
    book = _open(ledger)
    try:
        found = book.windows(profile=profile, run_id=run_id)
    finally:
        book.close()
    return [w for w in found if not hosts or w.host in hosts]


def _host_names(hosts: str | None, inventory: str | None) -> list[str]:
    """--hosts as host names, a group standing for its members when an inventory names it (a host
    the inventory no longer lists still has its runs)."""
    names = [h.strip() for h in hosts.split(",") if h.strip()] if hosts else []
    if not names:
        return []
    from specctl.hosts.inventory import inventory_path

    path = inventory_path(inventory)
    groups: dict[str, list[str]] = {}
    if path is not None:
        from specctl.profile import load_document
        from specctl.profile.inventory import Inventory

        groups = dict(load_document(path, Inventory, "Inventory").model.groups)
    return list(dict.fromkeys(member for name in names for member in groups.get(name, [name])))


def _runs(book: Any, *, profile: str | None, hosts: list[str], kind: str | None, limit: int) -> list[Run]:
    """The newest `limit` runs that match, oldest first; a run on any of `hosts` counts once."""
    if len(hosts) <= 1:
        found: list[Run] = book.runs(profile=profile, host=hosts[0] if hosts else None, kind=kind, limit=limit)
        return found
    merged = {r.id: r for host in hosts for r in book.runs(profile=profile, host=host, kind=kind, limit=limit)}
    ordered = sorted(merged.values(), key=lambda r: (r.started_at, r.id))  # the ledger's own order
    return ordered[-limit:] if limit else ordered


def show(
    ctx: typer.Context,
    run: Annotated[str, typer.Argument(help="Run id, a unique prefix, or the short id `runs` shows.")],
    ledger: LedgerOpt = None,
    json_mode: JsonOpt = False,
) -> None:
    """One run, whole: inputs, command, hosts with their facts, commands, measurements and verdicts."""
    from rich.console import Group
    from rich.pretty import Pretty

    from specctl.cli.views import steps_view, verdict_view
    from specctl.ledger.history import find_run

    output = command_output(ctx, json_mode)
    book = _open(ledger)
    try:
        found = find_run(book, run)
    finally:
        book.close()
    head = (
        f"{found.id}  {found.kind}  {found.profile} v{found.profile_version}  {found.status}\n"
        f"  by {found.user}@{found.machine}: {found.command}\n  {found.started_at} .. {found.finished_at or 'running'}"
        + (f"\n  reason: {found.reason}" if found.reason else "")
        + (f"\n  parent: {found.parent}" if found.parent else "")
    )
    views: list[Any] = [head]
    for record in found.host_records:
        if found.kind == "tune" and record.verdict and record.verdict.get("candidates") is not None:
            from specctl.cli.tune_cmds import tune_view

            views.append(tune_view(record.verdict))
        elif record.verdict and record.verdict.get("gates") is not None:
            views.append(verdict_view(record.host, record.verdict))
        else:
            views.append(Pretty({"host": record.host, "release": record.release, "verdict": record.verdict}))
    if found.events:
        views.append(steps_view(found.events))
    data = found.to_dict()
    if found.kind == "watch":
        from specctl.cli.views import windows_view

        data["windows"] = [dataclasses.asdict(w) for w in _windows(ledger, None, [], found.id)]
        views.append(windows_view(data["windows"]))
    output.result(data, Group(*views))


def diff(
    ctx: typer.Context,
    run_a: Annotated[str, typer.Argument(help="First run (id, prefix or short id).")],
    run_b: Annotated[str, typer.Argument(help="Second run (id, prefix or short id).")],
    ledger: LedgerOpt = None,
    json_mode: JsonOpt = False,
) -> None:
    """Two runs side by side: profile fields, capture, rendered commands, host facts, measurements."""
    from specctl.cli.views import diff_view
    from specctl.ledger.history import find_run, run_diff

    output = command_output(ctx, json_mode)
    book = _open(ledger)
    try:
        a, b = find_run(book, run_a), find_run(book, run_b)
    finally:
        book.close()
    changes = run_diff(a, b)
    output.result({"a": a.id, "b": b.id, **changes}, diff_view(a.id, b.id, changes))
