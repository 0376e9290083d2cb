"""deploy, status, logs, stop, unlock: the commands that act on hosts."""

from __future__ import annotations

import shlex
import time
from typing import TYPE_CHECKING, Annotated, Any

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
    engines_as_judge,
    selected_hosts,
)
from specctl.cli._output import host_line, table
from specctl.cli._recording import recorded
from specctl.constants import STAGE_PARALLEL, STARTUP_BUDGET_S
from specctl.errors import CheckFailed, HostError, InputError

if TYPE_CHECKING:
    from rich.console import RenderableType
    from rich.text import Text

ROLLED_BACK_EXIT = 4  # deployed, verify failed, rolled back
FOLLOW_POLL_S = 1.0  # how often `logs -f` asks each host for what its log gained
StageParallelOpt = Annotated[
    int,
    typer.Option(
        "--stage-parallel", min=1, help="Hosts downloading checkpoints at once (the Hub or your mirror is shared)."
    ),
]


def register(app: typer.Typer) -> None:
    for fn in (hosts, stage, deploy, status, logs, stop, unlock):
        app.command(fn.__name__)(fn)


def hosts(
    ctx: typer.Context,
    names: Annotated[
        list[str] | None, typer.Argument(help="Hosts or groups (default: every inventory host).", show_default=False)
    ] = None,
    hosts_opt: HostsOpt = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    check: Annotated[
        bool, typer.Option("--check", help="Connect and gather facts: GPUs, CUDA, Python, engine, disk, port.")
    ] = False,
    python: Annotated[
        str, typer.Option("--python", help="Interpreter to ask for Python and engine versions (default: the host's).")
    ] = "",
    engine: Annotated[str, typer.Option("--engine", help="Engine whose version to report.")] = "sglang",
    port: Annotated[int, typer.Option("--port", help="Port to test.")] = 30000,
    out: FormatOpt = "normal",
    json_mode: JsonOpt = False,
) -> None:
    """The inventory's hosts; with --check, reachability and facts, in parallel. A host that cannot be
    reached is said under the table, whole (a host key's fingerprint with it); `-o wide` lists every
    GPU and puts the error in its row."""
    from rich.console import Group
    from rich.text import Text

    from specctl.engines import get_engine
    from specctl.flows import servers
    from specctl.hosts.inventory import inventory_path, resolve_hosts

    output = command_output(ctx, json_mode or out == "json")
    wide = out == "wide"
    path = inventory_path(inventory)
    names = [
        *(names or ()),
        *(h.strip() for h in (hosts_opt or "").split(",") if h.strip()),
    ]  # as arguments or as --hosts
    if not names:
        from specctl.profile import load_document
        from specctl.profile.inventory import Inventory

        names = list(load_document(path, Inventory, "Inventory").model.hosts) if path else ["local"]
    specs = resolve_hosts(names, path)
    if not check:
        listed = table("host", "ssh", "root", "python", wide=wide)
        for h in specs:
            listed.add_row(
                h.name,
                h.ssh_alias or (str(h.ssh_overrides.get("hostname")) if h.ssh_overrides else "local"),
                h.root or f"~/.specctl/hosts/{h.name} (default)",
                h.python or "-",
            )
        output.result(
            {"hosts": [{"name": h.name, "ssh": h.ssh_alias, "root": h.root, "python": h.python} for h in specs]},
            Group(Text("inventory", style="bold"), listed),
            fit=not wide,
        )
        return
    rows = servers.facts(
        servers.Reach(ssh_config, accept_new_host_key),
        specs,
        python=python,
        port=port,
        distribution=get_engine(engine).distribution(),
    )
    checked = table("host", "reachable", "GPUs", "CUDA", "python", engine, "free disk", f"port {port}", wide=wide)
    for r in rows:
        f = r.get("facts") or {}
        gpus = [f"{g['name']} ({g['memory_mib']} MiB)" for g in f.get("gpus", ())]
        gpus_text = (", ".join(gpus) if wide else _counted(gpus)) or "none"
        checked.add_row(
            r["host"],
            "yes" if r["reachable"] else f"NO: {r.get('error')}" if wide else "NO",
            gpus_text if f else "-",
            f.get("cuda") or "-",
            f.get("python") or "-",
            f.get("engine_version") or "-",
            f"{f['disk_free_gib']} GiB" if f.get("disk_free_gib") is not None else "-",
            {True: "free", False: "IN USE", None: "-"}[f.get("port_free")],
        )
    errors = [] if wide else said_under([(r["host"], str(r.get("error"))) for r in rows if not r["reachable"]])
    output.result({"hosts": rows}, Group(Text("hosts", style="bold"), checked, *errors), fit=not wide)
    if not all(r["reachable"] for r in rows):
        raise typer.Exit(HostError.exit_code)


def said_under(errors: list[tuple[str, str]]) -> list[Text]:
    """Each host's error as a paragraph under a narrow table, named once: wrapped between words, so a
    host key's fingerprint (one 50-character word) is never folded into a narrow cell or cut short."""
    from rich.text import Text

    return [Text(host_line(host, e)) for host, e in errors]


def _counted(items: list[str]) -> str:
    """Equal items counted, in first-seen order: `8 x NVIDIA H200 (143771 MiB)`."""
    counts = {item: items.count(item) for item in items}
    return ", ".join(item if n == 1 else f"{n} x {item}" for item, n in counts.items())


def stage(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    reason: ReasonOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Say what each host has and what it would fetch; fetch nothing.")
    ] = False,
    verify: Annotated[
        bool,
        typer.Option(
            "--verify", help="Hash every staged file again against the Hub's checksums (the hash cache ignored)."
        ),
    ] = False,
    stage_parallel: StageParallelOpt = STAGE_PARALLEL,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    out: FormatOpt = "normal",
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
) -> None:
    """Put the profile's Hugging Face checkpoints (target and drafter, at their pinned revisions) in
    each host's cache, with the engine's own Python; nothing running is touched. A deploy does the
    same first; staging ahead keeps the deploy window short. Resumes an interrupted download.
    --offline asks no Hub: a complete snapshot already in a host's cache is staged, content unverified."""
    from rich.console import Group
    from rich.text import Text

    from specctl.flows import static
    from specctl.flows.stage import stage_hosts
    from specctl.release.staging import size_text

    output = command_output(ctx, json_mode or out == "json")
    wide = out == "wide"
    if verify and offline:
        raise InputError(
            "--verify checks the staged files against the checksums the Hub publishes: it cannot run offline",
            fix="drop --offline (and unset HF_HUB_OFFLINE); the hosts must reach the Hub (or HF_ENDPOINT)",
        )
    report = static.check(profile, offline=offline)
    p = report.inputs.profile
    selected = selected_hosts(p.hosts, hosts, inventory)
    with recorded(
        output,
        ledger=ledger,
        reason=reason,
        secrets=p.secrets,
        ssh_config=ssh_config,
        accept_new_host_key=accept_new_host_key,
        stage_parallel=stage_parallel,
        offline=offline,
    ) as rc:
        reports = stage_hosts(rc, report, selected, dry_run=dry_run, verify=verify)
    shown = table("host", "checkpoint", "state", wide=wide)
    for r in reports:
        if r.error:
            shown.add_row(r.host, "-", Text(f"FAILED: {r.error}") if wide else "FAILED")
        for s in r.staged:
            shown.add_row(
                r.host,
                s.repo,
                (
                    f"verified: {size_text(s.hashed)} hashed again"
                    + (f", fetched {size_text(s.fetched)}" if s.fetched else "")
                    + (f", {s.refetch_text()}" if s.refetched else "")
                )
                if verify
                else s.state(),
            )
        for planned in r.planned:
            shown.add_row(r.host, planned.repo, f"would fetch {size_text(planned.fetch)} of {size_text(planned.bytes)}")
        if r.ok and not r.staged and not r.planned:
            shown.add_row(r.host, "-", "nothing to stage (the models are paths on the host)")
    title = Text(f"{'stage plan' if dry_run else 'stage'}: {p.metadata.name}", style="bold")
    errors = [] if wide else said_under([(r.host, r.error) for r in reports if r.error])
    output.result(
        {"profile": p.metadata.name, "dry_run": dry_run, "hosts": [r.to_dict() for r in reports]},
        Group(title, shown, *errors),
        fit=not wide,
    )
    for why in sorted({s.unverified for r in reports for s in r.staged if s.unverified}):
        output.hint(
            f"content unverified: {why}. Complete by size (the snapshot's index and shard headers); "
            "`specctl stage --verify` checks it against the Hub's checksums"
        )
    if not all(r.ok for r in reports):
        raise typer.Exit(HostError.exit_code)


def deploy(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    reason: ReasonOpt = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Show what would change on each host; change nothing.")
    ] = False,
    max_failures: Annotated[
        int,
        typer.Option(
            "--max-failures",
            help="Hosts that may fail: past it nothing stops anywhere (before the stop), or the others roll back.",
        ),
    ] = 0,
    skip_check: Annotated[
        bool, typer.Option("--skip-check", help="Deploy even when static checks fail (recorded).")
    ] = False,
    startup_timeout: Annotated[
        float, typer.Option("--startup-timeout", help="Seconds a server may take to answer a generation.")
    ] = STARTUP_BUDGET_S,
    no_verify: Annotated[
        bool, typer.Option("--no-verify", help="Do not verify after the deploy (the run records no verdict).")
    ] = False,
    no_rollback: Annotated[
        bool, typer.Option("--no-rollback", help="Keep a release whose verify failed (exit 1 instead of 4).")
    ] = False,
    baseline_mode: BaselineOpt = "auto",
    stage_parallel: StageParallelOpt = STAGE_PARALLEL,
    no_stage: Annotated[
        bool,
        typer.Option(
            "--no-stage",
            help="Do not stage Hub checkpoints first: the engine downloads "
            "them when it starts, after the running server was stopped (a longer outage).",
        ),
    ] = False,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    out: FormatOpt = "normal",
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
) -> None:
    """Check a profile, put it on its hosts (release directory, lock, stop, start, readiness, switch),
    verify it, and roll a host back by itself when its verify fails (exit 4)."""
    from specctl.cli.views import findings_view, show_reports
    from specctl.facts.remote import ReadOnHosts
    from specctl.flows import servers, static
    from specctl.flows.baseline import checked_mode
    from specctl.flows.deploy import deploy as deploy_flow

    output = command_output(ctx, json_mode or out == "json")
    mode = checked_mode(baseline_mode)
    # host paths this machine cannot see: read on every selected host, refused when the hosts' copies differ
    report = static.check(
        profile,
        offline=offline,
        on_hosts=ReadOnHosts(
            lambda p: selected_hosts(p.hosts, hosts, inventory), ssh_config, accept_new_host_key, every=True
        ),
    )
    report = engines_as_judge(
        report, selected_hosts(report.inputs.profile.hosts, hosts, inventory), ssh_config, accept_new_host_key
    )
    errors = [f for f in report.findings if f.severity.value == "error"]
    if errors and not skip_check:
        output.hint(findings_view(f"deploy refused: {profile}", errors))
        raise CheckFailed(
            f"{len(errors)} check error(s); nothing deployed",
            fix=f"fix them (specctl check {profile}) or pass --skip-check",
        )
    selected = selected_hosts(report.inputs.profile.hosts, hosts, inventory)
    p = report.inputs.profile
    if dry_run:
        import os

        rows = servers.preview(
            servers.Reach(ssh_config, accept_new_host_key),
            report,
            selected,
            secrets_env={n: os.environ[n] for n in p.secrets if n in os.environ},
        )
        title = f"dry run: {p.metadata.name} v{p.metadata.version}"
        output.result(
            {"dry_run": rows},
            _dry_run_view(rows, title, wide=out == "wide", width=output.out.width - 2),
            fit=out != "wide",
        )
        if not all(row["prove"]["ok"] for row in rows):  # what a deploy would do: fail at prove (a host failure)
            raise typer.Exit(HostError.exit_code)
        return
    with recorded(
        output,
        ledger=ledger,
        reason=reason,
        secrets=p.secrets,
        ssh_config=ssh_config,
        accept_new_host_key=accept_new_host_key,
        budget_s=startup_timeout,
        stage_parallel=stage_parallel,
        offline=offline,
    ) as rc:
        reports = deploy_flow(
            rc,
            report,
            selected,
            max_failures=max_failures,
            run_verify=not no_verify,
            auto_rollback=not no_rollback,
            baseline_mode=mode,
            skip_check=skip_check,
            stage=not no_stage,
        )
    show_reports(
        output,
        reports,
        f"deploy {p.metadata.name} v{p.metadata.version}",
        wide=out == "wide",
        profile=p.metadata.name,
        version=p.metadata.version,
    )
    for o in reports:
        if o.log_tail and not output.json_mode:
            output.err.print(f"[bold]{o.host}[/]: last lines of the server log:")
            for line in o.log_tail[-12:]:
                output.err.print(f"  {line}", markup=False, highlight=False)
    if not all(o.ok for o in reports):
        raise typer.Exit(HostError.exit_code)
    if any(o.rolled_back_to for o in reports):
        raise typer.Exit(ROLLED_BACK_EXIT)
    if not no_verify and not all(o.passed for o in reports):
        raise typer.Exit(CheckFailed.exit_code)


def _dry_run_view(rows: list[dict[str, Any]], title: str, *, wide: bool, width: int) -> RenderableType:
    """`deploy --dry-run` for people (the rows of `servers.preview`). Narrow: per host what runs now
    and what staging would fetch, then the deploy's prove (ok, or each problem with its fix), then the
    drafter overlay and the launch command, broken before each option as the launch script is
    (`render`), once for the hosts that share it. `wide`: one row per host with every column, the
    command on one line."""
    from rich.console import Group
    from rich.padding import Padding
    from rich.text import Text

    from specctl.plan.render import command_lines
    from specctl.release.staging import size_text

    def staged(x: dict[str, Any]) -> str:
        if x.get("error"):
            return f"{x['repo']}: cannot tell: {x['error']}"
        return f"{x['repo']}: " + (
            "staged" if x["staged"] else f"fetch {size_text(x['fetch'])} of {size_text(x['bytes'])}"
        )

    def stage_text(row: dict[str, Any]) -> str:
        text = ("; " if wide else "\n").join(staged(x) for x in row.get("stage", ())) or "nothing (paths on the host)"
        disk = row.get("disk")
        if disk and not disk["fits"]:
            text += ("; " if wide else "\n") + f"DISK SHORT: {size_text(disk['free'])} free in {disk['cache']}"
        return text

    def overlay_text(row: dict[str, Any]) -> str:
        overlay = row.get("overlay")
        return f"{overlay['directory']} -> {overlay['links_to']}, ids {overlay['ids']}" if overlay else "-"

    def problem_text(x: dict[str, Any]) -> str:
        return f"{x['check']}: {x['message']} (fix: {x['fix']})"

    if wide:
        shown = table("host", "current", "stage", "drafter overlay", "prove", "launch", wide=True)
        for row in rows:
            launch = row["launch"] + (f"\nas a Slurm job: {shlex.join(row['job'])}" if row.get("job") else "")
            proof = row["prove"]
            proved = "ok" if proof["ok"] else "FAILED: " + "; ".join(problem_text(x) for x in proof["problems"])
            shown.add_row(row["host"], row["current"], stage_text(row), overlay_text(row), proved, launch)
        return Group(Text(title, style="bold"), shown)
    shown = table("host", "current", "stage", wide=False)
    for row in rows:
        shown.add_row(row["host"], row["current"], stage_text(row))
    blocks: list[RenderableType] = [Text(title, style="bold"), shown]
    # the deploy's prove on each host: ok (said once for the hosts it passed on), or each problem with its fix
    proven = [row["host"] for row in rows if row["prove"]["ok"]]
    if proven:
        on = f"all {len(proven)} hosts" if len(proven) == len(rows) > 2 else ", ".join(proven)
        blocks.append(Text(f"prove ok on {on}"))
    for row in rows:
        if not row["prove"]["ok"]:
            blocks.append(Text(f"prove FAILED on {row['host']} (a deploy would stop at it, before stopping anything):"))
            for x in row["prove"]["problems"]:  # wrapped under its own indent, the fix under the problem
                blocks.append(
                    Padding(Text(f"{x['check']}: {x['message']}", overflow="fold"), (0, 0, 0, 2), expand=False)
                )
                blocks.append(Padding(Text(f"fix: {x['fix']}", overflow="fold"), (0, 0, 0, 4), expand=False))
    # what the hosts share is said once: a single-node profile's command is the same on every host
    said: dict[tuple[str, tuple[str, ...]], list[str]] = {}
    for row in rows:
        if row.get("overlay"):
            o = row["overlay"]
            linked = (f"{o['directory']} (ids {o['ids']})", f"links to {o['links_to']}")
            said.setdefault(("drafter overlay", linked), []).append(row["host"])
        launch = tuple(command_lines(shlex.split(row["launch"]), width=width))
        said.setdefault(("launch", launch), []).append(row["host"])
        if row.get("job"):
            said.setdefault(("Slurm job", tuple(command_lines(row["job"], width=width))), []).append(row["host"])
    for (what, lines), names in said.items():
        on = f"all {len(names)} hosts" if len(names) == len(rows) > 2 else ", ".join(names)
        blocks += [Text(f"{what} on {on}:"), *(Text("  " + line, overflow="fold") for line in lines)]
    return Group(*blocks)


def status(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    out: FormatOpt = "normal",
    json_mode: JsonOpt = False,
) -> None:
    """What runs on each host: current release, its process and health, any other server of the
    profile (a release not made current stops itself by its deadline), and who holds the lock. A host
    that cannot be reached is said under the table (`-o wide`: in its row)."""
    from rich.console import Group
    from rich.text import Text

    from specctl.flows import servers
    from specctl.profile import load_profile

    output = command_output(ctx, json_mode or out == "json")
    wide = out == "wide"
    p = load_profile(profile, check_files=False).model
    rows = servers.status(
        servers.Reach(ssh_config, accept_new_host_key),
        p.metadata.name,
        p.engine.port,
        selected_hosts(p.hosts, hosts, inventory),
    )
    shown = table("host", "current release", "running", "healthy", "state", wide=wide)
    for r in rows:
        state = "unreachable" if r.error and not wide else r.summary
        shown.add_row(
            r.host,
            r.current or "-",
            "yes" if r.running else "no",
            "yes" if r.healthy else "no",
            Text(state + (f"; locked by {r.locked_by}" if r.locked_by else "")),
        )
    errors = [] if wide else said_under([(r.host, r.error) for r in rows if r.error])
    output.result(
        {"profile": p.metadata.name, "hosts": [{**r.__dict__, "state": r.summary} for r in rows]},
        Group(Text(p.metadata.name, style="bold"), shown, *errors),
        fit=not wide,
    )
    if any(r.error for r in rows):
        raise typer.Exit(HostError.exit_code)


def logs(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    lines: Annotated[int, typer.Option("-n", "--lines", help="Lines from the end.")] = 50,
    follow: Annotated[bool, typer.Option("-f", "--follow", help="Keep printing new lines (Ctrl-C stops).")] = False,
    json_mode: JsonOpt = False,
) -> None:
    """The server log of the current release on each host; with --json, one object per line: host, line."""
    from specctl.cli._logtail import LogTail
    from specctl.flows.servers import Reach
    from specctl.profile import load_profile
    from specctl.release import release as rel

    output = command_output(ctx, json_mode)
    p = load_profile(profile, check_files=False).model
    name = p.metadata.name
    reach = Reach(ssh_config, accept_new_host_key)
    tails: list[tuple[str, LogTail]] = []
    for spec in selected_hosts(p.hosts, hosts, inventory):
        t, root = reach.open(spec)
        run_id = rel.linked(t, root, name)
        if run_id:
            tails.append((spec.name, LogTail(t, rel.Release(t, root, name, run_id).path(rel.LOG))))
        else:
            output.hint(f"{spec.name}: {name} has no current release")

    def show(host: str, line: str) -> None:
        output.stream({"host": host, "line": line}, f"{host} | {line}" if len(tails) > 1 else line)

    try:
        while True:
            for where, tail in tails:
                for line in tail.read(lines):
                    show(where, line)
            if not follow:
                break
            _pause()
    except KeyboardInterrupt:  # how -f ends: quietly, with the shell's code for SIGINT
        raise typer.Exit(130) from None
    for where, tail in tails:
        last = tail.rest()
        if last is not None:
            show(where, last)


def _pause() -> None:
    """Between two reads of a followed log."""
    time.sleep(FOLLOW_POLL_S)


def stop(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    json_mode: JsonOpt = False,
) -> None:
    """Stop every server of the profile on each host (current or not; whole process groups), under its lock."""
    import shlex
    import sys

    from specctl.flows import servers
    from specctl.profile import load_profile

    output = command_output(ctx, json_mode)
    p = load_profile(profile, check_files=False).model
    notes: dict[str, list[str]] = {}

    def note(host: str, text: str) -> None:  # what taking the lock found (an empty lock taken over, say)
        notes.setdefault(host, []).append(text)
        from rich.text import Text

        output.hint(Text(f"note: {host_line(host, text)}"))

    result = servers.stop(
        servers.Reach(ssh_config, accept_new_host_key),
        p.metadata.name,
        selected_hosts(p.hosts, hosts, inventory),
        command=shlex.join(["specctl", *sys.argv[1:]]),
        on_note=note,
    )
    stopped = {h: bool(r) if isinstance(r, list) else False for h, r in result.items()}
    lines = [
        f"{h}: " + (f"FAILED: {r}" if isinstance(r, str) else f"stopped {', '.join(r)}" if r else "nothing running")
        for h, r in result.items()
    ]
    output.result(
        {
            "stopped": stopped,
            "releases": {h: r for h, r in result.items() if isinstance(r, list)},
            "errors": {h: r for h, r in result.items() if isinstance(r, str)},
            "notes": notes,
        },
        "\n".join(lines),
    )
    if any(isinstance(r, str) for r in result.values()):
        raise typer.Exit(HostError.exit_code)


def unlock(
    ctx: typer.Context,
    profile: ProfileArg,
    hosts: HostsOpt = None,
    inventory: InventoryOpt = None,
    reason: ReasonOpt = None,
    ledger: LedgerOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
    force: Annotated[
        bool, typer.Option("--force", help="Remove the lock even though its holder may still run.")
    ] = False,
    json_mode: JsonOpt = False,
) -> None:
    """Remove a stale lock, showing whose it was; refused while its holder runs unless --force.
    Recorded in the ledger."""
    from specctl.flows.unlock import unlock as unlock_flow
    from specctl.profile import load_profile
    from specctl.release import lock

    output = command_output(ctx, json_mode)
    loaded = load_profile(profile, check_files=False)
    p = loaded.model
    selected = selected_hosts(p.hosts, hosts, inventory)
    with recorded(
        output, ledger=ledger, reason=reason, ssh_config=ssh_config, accept_new_host_key=accept_new_host_key
    ) as rc:
        run_id, removed = unlock_flow(
            rc, p.model_dump(mode="json", by_alias=True), loaded.sha256, selected, force=force
        )
    output.result(
        {"run": run_id, "unlocked": removed},
        "\n".join(f"{h}: removed lock of {lock.describe(w)}" if w else f"{h}: not locked" for h, w in removed.items()),
    )
