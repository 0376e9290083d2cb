"""tune: search a profile's speculative settings on a live host and write the winner as its next version."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specctl.cli._options import (
    AcceptOpt,
    BaselineOpt,
    HostsOpt,
    InventoryOpt,
    JsonOpt,
    LedgerOpt,
    LegacyOutOpt,
    OfflineOpt,
    ProfileArg,
    ReasonOpt,
    SshConfigOpt,
    command_output,
    out_file,
    selected_hosts,
)
from specctl.cli._output import table
from specctl.cli._recording import recorded
from specctl.constants import STARTUP_BUDGET_S
from specctl.errors import CheckFailed, InputError

if TYPE_CHECKING:
    from rich.console import RenderableType

SHADES = " ░▒▓█"  # the heat map's shading where colour is off (NO_COLOR)


def register(app: typer.Typer) -> None:
    app.command("tune")(tune)


def tune(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    apply: Annotated[
        bool, typer.Option("--apply", help="Deploy and verify the winner afterwards (else the host keeps its release).")
    ] = False,
    output_file: Annotated[
        Path | None,
        typer.Option(
            "--out",
            metavar="FILE",
            help="Where to write the winner (default <name>-v<N>.yaml beside the profile, N the next version "
            "free there and in the ledger).",
        ),
    ] = None,
    legacy_out: LegacyOutOpt = None,
    html: Annotated[
        Path | None,
        typer.Option(
            "--html",
            "--plot-file",
            metavar="FILE",
            help="Also write the candidates and the heat map as a standalone HTML page "
            "(needs matplotlib: pip install 'specctl[plots]').",
        ),
    ] = None,
    startup_timeout: Annotated[
        float, typer.Option("--startup-timeout", help="Seconds a server may take to answer a generation.")
    ] = STARTUP_BUDGET_S,
    baseline_mode: BaselineOpt = "auto",
    reason: ReasonOpt = None,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
) -> None:
    """Measure the profile's `tune:` grid of speculative settings on one host, each as a release,
    dropping a candidate once its interval is decided below the best; write the winner as the next
    profile version and record a `tune` run. The host keeps its release unless --apply. `-o wide`
    adds each candidate's release and its throughput at the profile's other operating points."""
    from specctl.cli.views import findings_view
    from specctl.flows import static
    from specctl.flows.baseline import checked_mode
    from specctl.flows.tune import tune as tune_flow

    output = command_output(ctx, json_mode)
    output_file = out_file(output, output_file, legacy_out)
    if html is not None:
        from specctl.cli.plots import require

        require()  # before the search, not after an hour of it
    mode = checked_mode(baseline_mode)
    report = static.check(profile, offline=offline)
    errors = [f for f in report.findings if f.severity.value == "error"]
    if errors:
        output.hint(findings_view(f"tune refused: {profile}", errors))
        raise CheckFailed(
            f"{len(errors)} check error(s); nothing tuned", fix=f"fix them first (specctl check {profile})"
        )
    selected = selected_hosts(report.inputs.profile.hosts, hosts, inventory)
    if len(selected) != 1:
        raise InputError(
            f"tune measures on one host; {len(selected)} were named ({', '.join(h.name for h in selected)})",
            fix="pass --host NAME",
        )
    p = report.inputs.profile
    with recorded(
        output,
        ledger=ledger,
        reason=reason,
        secrets=p.secrets,
        ssh_config=ssh_config,
        accept_new_host_key=accept_new_host_key,
        budget_s=startup_timeout,
    ) as rc:
        result = tune_flow(rc, report, selected[0], apply=apply, output=output_file, baseline_mode=mode)
    data = result.to_dict()
    if html is not None:
        from specctl.cli.pages import tune_page

        html.write_text(tune_page(data), encoding="utf-8")
    output.result(data, tune_view(data, wide=legacy_out == "wide"), fit=legacy_out != "wide")
    if result.applied is not None and not result.applied.passed:
        raise typer.Exit(CheckFailed.exit_code)


def tune_view(data: Mapping[str, Any], *, wide: bool = False) -> RenderableType:
    """Every candidate with its objective's interval, the requests it used and how it ended; the
    heat map; what was left out or failed; where the winner was written. Narrow: those columns, to
    fit 80, and a failure's reason under the table; `wide`: each candidate's release (what
    `rollback --to` takes) and its throughput at the profile's other operating points too."""
    from rich.console import Group
    from rich.text import Text

    objective = data["objective"]
    # the profile's other operating points, measured for the candidates still in the running
    others = sorted({int(c) for row in data["candidates"] for c in (row.get("points") or {}) if c.isdigit()})
    at = f"{objective['metric']} @{objective['concurrency']}"
    at_others = [f"tok/s @{c}" for c in others]
    if wide:
        columns = ("candidate", "release", at, "interval", "requests", *at_others, "result")
        shown = table(*columns, wide=True, right=("requests", *at_others))
    else:
        shown = table("candidate", at, "requests", "result", wide=False, right=("requests",))
    failures = []
    for row in data["candidates"]:
        iv = row.get("interval") or {}
        interval = f"[{_num(iv.get('low'))}, {_num(iv.get('high'))}]" if iv else "-"
        result = (
            "WINNER"
            if row["winner"]
            else (f"failed: {row['failed']}" if wide else "FAILED")
            if row["failed"]
            else "eliminated"
            if row["eliminated"]
            else "kept"
        )
        candidate = row["key"] + (" (current)" if row["incumbent"] else "")
        if row["failed"] and not wide:
            failures.append(_note(f"failed: {candidate}: {row['failed']}"))
        if not wide:
            figure = f"{_num(row.get('estimate'))} {interval}" if iv else _num(row.get("estimate"))
            shown.add_row(candidate, figure, str(row["requests"]), result)
            continue
        points = row.get("points") or {}
        at_points = [
            _num(((points.get(str(c)) or {}).get("output_tokens_per_s") or {}).get("estimate")) for c in others
        ]
        shown.add_row(
            candidate,
            row.get("release") or "-",
            _num(row.get("estimate")),
            interval,
            str(row["requests"]),
            *at_points,
            result,
        )
    blocks: list[RenderableType] = [
        Text(f"tune {data['profile']} v{data['version']} on {data['host']} (run {data['run']})", style="bold"),
        shown,
        *failures,
        Text(
            f"{data['requests']} requests in all (measuring every candidate to {data['planned_requests']}: "
            f"{data['exhaustive_requests']})"
            + (
                f", and {data['other_point_requests']} at the other operating points"
                if data.get("other_point_requests")
                else ""
            )
            + f"; {data['level_note']}"
        ),
    ]
    if not wide:
        blocks.append(Text(f"-o wide adds each candidate's {', '.join(['release', *at_others])}", style="dim"))
    blocks.append(heat_map_view(data["heat_map"], objective["metric"], wide=wide))
    for d in data.get("dropped") or []:
        blocks.append(_note(f"not measured: {d['key']}: {d['reason']}"))
    if data.get("profile_file"):
        blocks.append(
            Text(
                f"winner written to {data['profile_file']}"
                + ("" if data.get("applied") else f"; the host keeps {data.get('restored') or 'nothing running'}")
            )
        )
    applied = data.get("applied")
    if applied:
        blocks.append(
            Text(
                f"applied on {applied['host']}: {applied['detail']}"
                + (", verify passed" if (applied.get("verdict") or {}).get("passed") else ", verify FAILED")
            )
        )
    return Group(*blocks)


def heat_map_view(heat: Mapping[str, Any], metric: str, *, wide: bool = False) -> RenderableType:
    """num_steps down, the other setting across, each cell shaded by the objective (darkest: best)."""
    from rich.console import Group
    from rich.text import Text

    values = [v for row in heat["cells"] for v in row if v is not None]
    low, high = (min(values), max(values)) if values else (0.0, 1.0)
    shown = table(f"num_steps \\ {heat['columns']}", *(str(c) for c in heat["column_values"]), wide=wide)
    for steps, row in zip(heat["row_values"], heat["cells"], strict=True):
        shown.add_row(str(steps), *(_cell(v, low, high) for v in row))
    return Group(Text(f"heat map: {metric}", style="bold"), shown) if values else Text("heat map: nothing measured")


def _note(text: str) -> RenderableType:
    """A line under a table, indented as a whole (its wrapped lines too)."""
    from rich.padding import Padding
    from rich.text import Text

    return Padding(Text(text), (0, 0, 0, 2))


def _cell(value: float | None, low: float, high: float) -> Any:
    from rich.text import Text

    if value is None:
        return Text("-")
    share = (value - low) / ((high - low) or 1.0)
    green = int(60 + 140 * share)
    return Text(f"{SHADES[1 + round(share * (len(SHADES) - 2))]} {_num(value)}", style=f"on rgb(20,{green},40)")


def _num(value: object, digits: int = 4) -> str:
    return f"{value:.{digits}g}" if isinstance(value, (int, float)) else "-"
