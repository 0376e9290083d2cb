"""watch: the serving release's acceptance, window by window, from the engine's own metrics."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated

import typer

from specctl.cli._options import (
    AcceptOpt,
    HostsOpt,
    InventoryOpt,
    JsonOpt,
    LedgerOpt,
    OfflineOpt,
    ProfileArg,
    ReasonOpt,
    SshConfigOpt,
    command_output,
    selected_hosts,
)
from specctl.cli._recording import recorded
from specctl.errors import InputError

_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def duration(text: str) -> float:
    """`45s`, `5m`, `1h`, `1h30m` (a bare number is seconds) in seconds."""
    parts = re.findall(r"(\d+(?:\.\d+)?)([smhd]?)", text.strip())
    if not parts or "".join(n + u for n, u in parts) != text.strip() or not float(parts[0][0]) > 0:
        raise InputError(f"{text!r} is not a duration", fix="write it as 45s, 5m, 1h or 1h30m")
    return sum(float(n) * _UNITS[u or "s"] for n, u in parts)


def register(app: typer.Typer) -> None:
    app.command("watch")(watch)


def watch(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    interval: Annotated[str, typer.Option("--interval", help="How often to judge a window (45s, 5m, 1h).")] = "5m",
    window: Annotated[str, typer.Option("--window", help="How much recent traffic each judgement covers.")] = "30m",
    once: Annotated[
        bool,
        typer.Option(
            "--once",
            help="Measure one window from now, judge it and exit "
            "(0 ok/unknown/unreadable, 1 degraded, 3 unreachable/down, 4 acted).",
        ),
    ] = False,
    probe: Annotated[
        bool,
        typer.Option(
            "--probe",
            help="Where a window has too little traffic or no metrics, judge a small probe from the workload.",
        ),
    ] = False,
    on_degraded: Annotated[
        str,
        typer.Option(
            "--on-degraded",
            help="alert (record, exit 1), plain (serve without speculation), or rollback (to a release that differs).",
        ),
    ] = "alert",
    cooldown: Annotated[
        str, typer.Option("--cooldown", help="No automatic action on a host for this long after one.")
    ] = "1h",
    textfile: Annotated[
        Path | None, typer.Option("--textfile", help="Write gauges for node-exporter's textfile collector into DIR.")
    ] = None,
    look_every: Annotated[
        str | None,
        typer.Option("--look-every", help="Between two looks at the engine (default: a thirtieth of the window)."),
    ] = None,
    reason: ReasonOpt = None,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
) -> None:
    """Judge the serving release on each host every --interval over the last --window of its traffic,
    from the engine's metrics: ok, degraded (decided below its verified interval less watch.tolerance,
    or below its gate) or unknown (too little traffic, or counters that cannot be trusted: NaN, ±Inf,
    negative, a series twice, a counter going back). down: no server of the current release runs;
    unreadable: its /metrics is not the Prometheus text format. Each window is recorded in the ledger."""
    from specctl.cli.views import watch_line, watch_view
    from specctl.flows import static
    from specctl.flows.watch import WatchOptions
    from specctl.flows.watch import watch as watch_flow

    output = command_output(ctx, json_mode)
    opts = WatchOptions(
        interval_s=duration(interval),
        window_s=duration(window),
        once=once,
        probe=probe,
        on_degraded=on_degraded,
        cooldown_s=duration(cooldown),
        textfile=textfile,
        look_every_s=duration(look_every) if look_every else None,
    )
    report = static.check(profile, offline=offline)
    selected = selected_hosts(report.inputs.profile.hosts, hosts, inventory)
    name = report.inputs.profile.metadata.name
    windows = []

    def shown(results: list) -> None:  # type: ignore[type-arg]
        windows.append([r.to_dict() for r in results])
        if not once:
            for r in results:
                output.stream({"profile": name, **r.to_dict()}, watch_line(r))

    with recorded(
        output,
        ledger=ledger,
        reason=reason,
        secrets=report.inputs.profile.secrets,
        ssh_config=ssh_config,
        accept_new_host_key=accept_new_host_key,
        live=False,  # its windows print as they come: no lines that change in place beside them
    ) as rc:
        status = watch_flow(rc, report, selected, opts, on_window=shown)
    if once and windows:
        output.result({"profile": name, "hosts": windows[-1]}, watch_view(name, windows[-1]))
    raise typer.Exit(status)
