"""validate, check, render: the commands that work on profiles without touching a host."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

import typer

from specctl.cli._options import (
    AcceptOpt,
    AssumeOpt,
    EnginePythonOpt,
    InventoryOpt,
    JsonOpt,
    OfflineOpt,
    OnOpt,
    ProfileArg,
    SshConfigOpt,
    engines_as_judge,
    facts_on_hosts,
)
from specctl.cli._output import Output
from specctl.errors import CheckFailed, DocumentError, InputError


def register(app: typer.Typer) -> None:
    app.command("validate")(validate)
    app.command("check")(check)
    app.command("render")(render)


def _output(ctx: typer.Context, json_mode: bool) -> Output:
    output: Output = ctx.obj
    output.json_mode = json_mode or output.json_mode
    return output


def validate(
    ctx: typer.Context,
    files: Annotated[list[Path], typer.Argument(help="Profiles, manifests or inventories to validate.", show_default=False)],
    json_mode: JsonOpt = False,
) -> None:
    """Validate specctl YAML files against their schema (kind is read from each file)."""
    from specctl.profile import validate_file

    output = _output(ctx, json_mode)
    results: list[dict[str, object]] = []
    errors: list[DocumentError] = []
    for file in files:
        try:
            kind, sha = validate_file(file)
            results.append({"file": str(file), "kind": kind, "ok": True, "sha256": sha, "problems": []})
        except DocumentError as exc:
            errors.append(exc)
            results.append({"file": str(file), "kind": None, "ok": False, "problems": [p.__dict__ for p in exc.problems]})
    if output.json_mode:
        output.result({"files": results, "ok": not errors})
    else:
        from specctl.cli._errors import report
        from specctl.cli.views import validation_view

        for error in errors:
            report(error, output)
        output.result(None, validation_view([(str(r["file"]), str(r["kind"] or "-"), None if r["ok"] else f"{len(r['problems'])} problem(s)")  # type: ignore[arg-type]
                                             for r in results]))
    if errors:
        raise typer.Exit(InputError.exit_code)


def check(ctx: typer.Context, profile: ProfileArg, json_mode: JsonOpt = False, offline: OfflineOpt = False,
          assume_convention: AssumeOpt = None, engine_python: EnginePythonOpt = None, on: OnOpt = None,
          inventory: InventoryOpt = None, ssh_config: SshConfigOpt = None, accept_new_host_key: AcceptOpt = False) -> None:
    """Run the static checks of a profile: capture layers, widths, vocab, TP, memory, engine flags.
    A checkpoint given as a host path that this machine cannot see is read on the profile's first
    host (or on --on HOST), over SSH."""
    from specctl.flows import static
    from specctl.hosts.inventory import inventory_path, resolve_hosts

    output = _output(ctx, json_mode)
    report = static.check(profile, offline=offline, assume_convention=assume_convention, engine_python=engine_python,
                          on_hosts=facts_on_hosts(on, inventory, ssh_config, accept_new_host_key))
    if on and not engine_python:  # the host's own engine judges, as a deploy there would be judged
        report = engines_as_judge(report, resolve_hosts([on], inventory_path(inventory)), ssh_config, accept_new_host_key)
    failed = any(f.severity.value == "error" for f in report.findings)
    data = {"profile": str(profile), "ok": not failed, "findings": [f.to_dict() for f in report.findings],
            "sha256": report.inputs.profile_sha256, "facts": {role: s.to_dict() for role, s in report.facts.items()}}
    if output.json_mode:
        output.result(data)
    else:
        from specctl.cli.views import findings_view

        p = report.inputs.profile
        output.result(data, findings_view(f"{p.metadata.name} v{p.metadata.version} ({profile})", report.findings))
    if failed:
        raise typer.Exit(CheckFailed.exit_code)


def render(
    ctx: typer.Context,
    profile: ProfileArg,
    node: Annotated[int | None, typer.Option("--node", help="Render one node rank only (multi-node profiles).")] = None,
    baseline: Annotated[bool, typer.Option("--baseline", help="The same target without speculation.")] = False,
    fmt: Annotated[Literal["sh", "json"], typer.Option("--format", help="Launch script (sh) or the whole plan (json).")] = "sh",
    force: Annotated[bool, typer.Option("--force", help="Render even when checks find errors.")] = False,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
    assume_convention: AssumeOpt = None,
    engine_python: EnginePythonOpt = None,
) -> None:
    """Print the exact launch command(s) of a profile, deterministic and shell-quoted."""
    from specctl.flows import static
    from specctl.plan.render import render_json, render_sh

    output = _output(ctx, json_mode)
    report = static.check(profile, offline=offline, assume_convention=assume_convention, engine_python=engine_python)
    errors = [f for f in report.findings if f.severity.value == "error"]
    if errors and not force:
        from specctl.cli.views import findings_view

        output.hint(findings_view(f"render refused for {profile}", errors))
        raise CheckFailed(f"{len(errors)} check error(s); nothing rendered", fix=f"fix them (specctl check {profile}) or pass --force")
    plan = static.plan(report, baseline=baseline)
    nodes = plan.nodes
    if node is not None:
        if not 0 <= node < len(nodes):
            raise InputError(f"node {node} does not exist: the profile has {len(nodes)} node(s)", fix=f"use --node 0..{len(nodes) - 1}")
        nodes = (nodes[node],)
    if output.json_mode or fmt == "json":
        output.raw(render_json(plan) if node is None else render_json(plan.__class__(**{**plan.__dict__, "nodes": nodes})))
        return
    output.raw("\n".join(render_sh(plan, n) for n in nodes))
    if plan.overlay is not None:
        output.hint(f"# drafter overlay: {len(plan.overlay.links)} linked file(s) + config.json with "
                    f"eagle_aux_hidden_state_layer_ids {plan.capture['ids'] if plan.capture else None} (see --format json)")
