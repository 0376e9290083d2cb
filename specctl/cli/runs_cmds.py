"""runs, show, diff: reading the ledger (with a terminal chart and an HTML report of the trend)."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import typer

from specctl.cli._options import FormatOpt, InventoryOpt, JsonOpt, LedgerOpt, command_output
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
        Path | None,
        typer.Option(
            "--plot-file",
            metavar="FILE",
            help="Also write the charts as a standalone HTML report (needs matplotlib: pip install 'specctl[plots]').",
        ),
    ] = None,
    inventory: InventoryOpt = None,
    ledger: LedgerOpt = None,
    json_mode: JsonOpt = False,
) -> None:
    """The ledger's runs, oldest first. The short run ids shown are accepted by show, diff and rollback --to."""
    from datetime import UTC, datetime

    from specctl.cli.charts import terminal_chart, watch_chart
    from specctl.cli.views import runs_view
    from specctl.ledger.history import baselines_of, brief, metrics, short_ids, trend
    from specctl.ledger.schema import KINDS

    output = command_output(ctx, json_mode or out == "json")
    if kind is not None and kind not in KINDS:
        raise InputError(f"--kind {kind!r} is not a kind of run", fix=f"use one of: {', '.join(KINDS)}")
    if plot_file:
        from specctl.cli.plots import require

        require()
    names = _host_names(hosts, inventory)
    book = _open(ledger)
    try:
        found = _runs(book, profile=profile, hosts=names, kind=kind, limit=limit)
        baselines = baselines_of(book, found)
    finally:
        book.close()
    if plot or plot_file:
        series = trend(found, baselines)
        watched = [dataclasses.asdict(w) for w in _windows(ledger, profile, names)]
        if plot_file:
            from specctl.cli.pages import runs_page

            plot_file.write_text(runs_page(series, windows=watched, tunes=_tunes(found)), encoding="utf-8")
        chart = terminal_chart(series) + ("\n" + watch_chart(watched) if watched else "")
        output.result({"series": series, "watch": watched, **({"report": str(plot_file)} if plot_file else {})}, chart)
        return
    rows = [{**brief(r), **metrics(r, baselines)} for r in found]
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


def _tunes(found: list[Run]) -> list[dict[str, Any]]:
    """The tune runs' results among the runs (each as `tune --json` printed it)."""
    return [
        r.verdict
        for run in found
        if run.kind == "tune"
        for r in run.host_records
        if r.verdict and r.verdict.get("candidates") is not None
    ]


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
    plot_file: Annotated[
        Path | None,
        typer.Option(
            "--plot-file",
            metavar="FILE",
            help="Also write the run's charts as a standalone HTML report: per host the operating points' "
            "throughput and speedup and the verify sequence; a tune's heat map; a watch's windows "
            "(needs matplotlib: pip install 'specctl[plots]').",
        ),
    ] = None,
    out: FormatOpt = "normal",
    ledger: LedgerOpt = None,
    json_mode: JsonOpt = False,
) -> None:
    """One run, whole: inputs, command, hosts with their facts, commands, measurements and verdicts,
    then, where several hosts measured, their requests pooled."""
    from rich.console import Group
    from rich.pretty import Pretty

    from specctl.cli.views import pooled_view, steps_view, verdict_view
    from specctl.ledger.history import baselines_of, find_run, pool_run

    output = command_output(ctx, json_mode or out == "json")
    book = _open(ledger)
    try:
        found = find_run(book, run)
        pooled = pool_run(found, baselines_of(book, [found]))
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

            views.append(tune_view(record.verdict, wide=out == "wide"))
        elif record.verdict and record.verdict.get("gates") is not None:
            views.append(verdict_view(record.host, record.verdict))
        else:
            views.append(Pretty({"host": record.host, "release": record.release, "verdict": record.verdict}))
    if pooled is not None:
        gates: list[dict[str, Any]] = next(
            (r.verdict["gates"] for r in found.host_records if r.verdict and r.verdict.get("gates")), []
        )
        views.append(pooled_view(pooled, gates))
    if found.events:
        views.append(steps_view(found.events))
    data = {**found.to_dict(), "pooled": pooled}
    if found.kind == "watch":
        from specctl.cli.views import windows_view

        data["windows"] = [dataclasses.asdict(w) for w in _windows(ledger, None, [], found.id)]
        views.append(windows_view(data["windows"]))
    if plot_file:
        _plot_run(found, ledger, data.get("windows") or [], plot_file)
        data["report"] = str(plot_file)
        output.hint(f"report written to {plot_file}")
    output.result(data, Group(*views), fit=out != "wide")


def diff(
    ctx: typer.Context,
    run_a: Annotated[str, typer.Argument(help="First run (id, prefix or short id).")],
    run_b: Annotated[str, typer.Argument(help="Second run (id, prefix or short id).")],
    ledger: LedgerOpt = None,
    json_mode: JsonOpt = False,
) -> None:
    """Two runs side by side: profile fields, capture, rendered commands, host facts, measurements
    (pooled over hosts with their intervals, then per host)."""
    from specctl.cli.views import diff_view
    from specctl.ledger.history import baselines_of, find_run, run_diff

    output = command_output(ctx, json_mode)
    book = _open(ledger)
    try:
        a, b = find_run(book, run_a), find_run(book, run_b)
        baselines = baselines_of(book, [a, b])
    finally:
        book.close()
    changes = run_diff(a, b, baselines)
    output.result({"a": a.id, "b": b.id, **changes}, diff_view(a.id, b.id, changes))


def _plot_run(found: Run, ledger: str | None, windows: list[dict[str, Any]], path: Path) -> None:
    """Write `show --plot-file`'s page: each host's recorded verdict, its verify sequence replayed from
    the recorded requests, and the baseline's throughput it was compared with (when the ledger has it)."""
    from specctl.cli import plots
    from specctl.cli.pages import run_page
    from specctl.verdict import gates
    from specctl.verdict.points import baseline_from_dict
    from specctl.verdict.sequence import replay

    plots.require()
    planned = ((found.inputs.get("profile") or {}).get("verify") or {}).get("requests")
    hosts = []
    book = _open(ledger)
    try:
        for record in found.host_records:
            verdict = record.verdict or {}
            base_run = verdict.get("baseline_run")
            base_record = _baseline_record(book, base_run, record.host) if isinstance(base_run, str) else None
            baseline = baseline_from_dict(base_record) if base_record else None
            measured = record.measurements if verdict.get("points") and record.measurements else None
            hosts.append(
                {
                    "host": record.host,
                    "verdict": verdict,
                    "sequence": replay(verdict, measured, planned_n=planned, baseline=baseline) if measured else [],
                    "baseline": {c: iv.to_dict() for c, m in (baseline or {}).items() if (iv := gates.throughput(m))},
                }
            )
    finally:
        book.close()
    about = {
        "id": found.id,
        "kind": found.kind,
        "profile": found.profile,
        "version": found.profile_version,
        "status": found.status,
    }
    path.write_text(run_page(about, hosts, windows), encoding="utf-8")


def _baseline_record(book: Any, run_id: str, host: str) -> dict[str, Any] | None:
    """The requests of the baseline a verdict was judged against: its record of the same host, else its
    first with requests (as verify chose it, flows/baseline.py); None when the ledger no longer has it."""
    try:
        base = book.get(run_id)
    except InputError:
        return None
    records = sorted((r for r in base.host_records if r.measurements), key=lambda r: r.host != host)
    return dict(records[0].measurements) if records else None
