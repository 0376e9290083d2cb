"""verify, baseline, rollback: the commands that judge a running release and go back to a good one."""

from __future__ import annotations

from typing import Annotated, Any

import typer

from specctl.cli._options import (
    AcceptOpt,
    BaselineOpt,
    FormatOpt,
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
from specctl.errors import CheckFailed, HostError, InputError


def register(app: typer.Typer) -> None:
    for fn in (verify, baseline, rollback):
        app.command(fn.__name__)(fn)


def verify(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    baseline_mode: BaselineOpt = "auto",
    reason: ReasonOpt = None,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
    out: FormatOpt = "normal",
) -> None:
    """Static checks against each host, drift of the live server against the plan, and the live
    measurement with its gates (95 % intervals, stopping early once decided). Exit 1 when a gate fails;
    exit 3 when a host or its server could not be reached (nothing measured: the release's record is
    left as it was, and the run is recorded `unreachable`)."""
    from specctl.cli.views import show_reports
    from specctl.flows import static
    from specctl.flows.baseline import checked_mode
    from specctl.flows.verify import verify as verify_flow

    output = command_output(ctx, json_mode or out == "json")
    mode = checked_mode(baseline_mode)
    report = static.check(profile, offline=offline)
    selected = selected_hosts(report.inputs.profile.hosts, hosts, inventory)
    with recorded(
        output,
        ledger=ledger,
        reason=reason,
        secrets=report.inputs.profile.secrets,
        ssh_config=ssh_config,
        accept_new_host_key=accept_new_host_key,
    ) as rc:
        reports = verify_flow(rc, report, selected, baseline_mode=mode)
    show_reports(output, reports, f"verify {report.inputs.profile.metadata.name}", wide=out == "wide")
    if not all(r.ok for r in reports):
        raise typer.Exit(HostError.exit_code)
    if not all(r.passed for r in reports):
        raise typer.Exit(CheckFailed.exit_code)


def baseline(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    reason: ReasonOpt = None,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
) -> None:
    """Serve the profile's target without speculation on each host, measure it on the profile's
    workload and record it; verify divides by it. The profile's own server is restarted after. Exit 3
    when the baseline's server stops answering during the measurement (nothing measured: the run is
    recorded `unreachable`)."""
    from specctl.cli.views import baseline_view
    from specctl.flows import static
    from specctl.flows.baseline import baseline as baseline_flow
    from specctl.verdict.points import baseline_rows

    output = command_output(ctx, json_mode)
    report = static.check(profile, offline=offline)
    selected = selected_hosts(report.inputs.profile.hosts, hosts, inventory)
    rows: list[dict[str, Any]] = []
    with recorded(
        output,
        ledger=ledger,
        reason=reason,
        secrets=report.inputs.profile.secrets,
        ssh_config=ssh_config,
        accept_new_host_key=accept_new_host_key,
    ) as rc:
        for host in selected:
            run_id, measured = baseline_flow(rc, report, host)
            rows += baseline_rows(host.name, run_id, measured)
    output.result({"baselines": rows}, baseline_view(rows))


def rollback(
    ctx: typer.Context,
    profile: Annotated[
        str | None,
        typer.Argument(help="Profile name or file (default: from --to or the newest deploy).", show_default=False),
    ] = None,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    to: Annotated[
        str | None,
        typer.Option(
            "--to",
            metavar="RUN|PROFILE@VERSION",
            help="The release to go back to: a run (id, prefix or short id) or PROFILE@VERSION.",
        ),
    ] = None,
    reason: ReasonOpt = None,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    json_mode: JsonOpt = False,
    out: FormatOpt = "normal",
) -> None:
    """Restart a stored release (default: the newest verified one that is not serving), switch
    `current` and verify it; a release that spans nodes comes back on every node rank at once. The
    secrets its own profile names are passed from this environment. Exit 1 when its verify fails;
    exit 3 when a host fails, when the release is not proven before anything stops (a secret it names
    is not set here, say), or when its verify reached no server (the run is recorded `unreachable`,
    the release's verification left as it was)."""
    from specctl.cli.views import show_reports
    from specctl.flows.rollback import rollback_hosts
    from specctl.ledger.ledger import Ledger, ledger_path

    output = command_output(ctx, json_mode or out == "json")
    name, to_run, to_version, run_hosts = _rollback_choice(profile, to, Ledger(ledger_path(ledger), readonly=True))
    selected = selected_hosts(run_hosts, hosts, inventory)
    with recorded(
        output, ledger=ledger, reason=reason, ssh_config=ssh_config, accept_new_host_key=accept_new_host_key
    ) as rc:
        reports = rollback_hosts(rc, selected, name, to_run=to_run, to_version=to_version)
    show_reports(output, reports, f"rollback {name}", wide=out == "wide")
    if not all(r.ok for r in reports):
        raise typer.Exit(HostError.exit_code)
    if not all(r.passed for r in reports):
        raise typer.Exit(CheckFailed.exit_code)


def _rollback_choice(profile: str | None, to: str | None, book) -> tuple[str, str | None, int | None, list[str]]:  # type: ignore[no-untyped-def]
    """(profile name, run id, version, hosts the profile was deployed to) from the arguments and the ledger."""
    from pathlib import Path

    try:
        name = profile
        if profile and Path(profile).is_file():
            from specctl.profile import load_profile

            name = load_profile(Path(profile)).model.metadata.name
        to_run = to_version = None
        if to and "@" in to:
            name, _, version = to.rpartition("@")
            if not version.isdigit():
                raise InputError(
                    f"--to {to!r}: the version after @ must be a number", fix="for example --to my-profile@3"
                )
            to_version = int(version)
        elif to:
            from specctl.ledger.history import find_run

            try:
                run = find_run(book, to)
            except InputError:
                if not name:
                    raise
                to_run = to  # a release that is no run of its own (a tune candidate): the host's directory decides
            else:
                name, to_run = (
                    run.profile,
                    (run.host_records[0].release if run.host_records and run.host_records[0].release else run.id),
                )
        if not name:
            deploys = book.runs(kind="deploy")
            if not deploys:
                raise InputError(
                    "no profile given and no deploy in the ledger", fix="name the profile: specctl rollback PROFILE"
                )
            name = deploys[-1].profile
        hosts: list[str] = next((r.hosts for r in reversed(book.runs(profile=name, kind="deploy"))), [])
        return str(name), to_run, to_version, list(hosts)
    finally:
        book.close()
