"""validate, check, render: the commands that work on profiles without touching a host."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Literal

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
from specctl.constants import APP_NAME, K8S_MODEL_MOUNT, K8S_PYTHON
from specctl.errors import CheckFailed, DocumentError, InputError

if TYPE_CHECKING:
    from specctl.flows.static import CheckReport
    from specctl.plan.k8s import K8sOptions, PodProgram
    from specctl.profile.inventory import KubernetesCluster


_K8S = "Kubernetes (--platform k8s)"


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
    files: Annotated[
        list[Path], typer.Argument(help="Profiles, manifests or inventories to validate.", show_default=False)
    ],
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
            results.append(
                {"file": str(file), "kind": None, "ok": False, "problems": [p.__dict__ for p in exc.problems]}
            )
    if output.json_mode:
        output.result({"files": results, "ok": not errors})
    else:
        from specctl.cli._errors import report
        from specctl.cli.views import validation_view

        for error in errors:
            report(error, output)
        output.result(
            None,
            validation_view(
                [
                    (str(r["file"]), str(r["kind"] or "-"), None if r["ok"] else f"{len(r['problems'])} problem(s)")  # type: ignore[arg-type]
                    for r in results
                ]
            ),
        )
    if errors:
        raise typer.Exit(InputError.exit_code)


def check(
    ctx: typer.Context,
    profile: ProfileArg,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
    assume_convention: AssumeOpt = None,
    engine_python: EnginePythonOpt = None,
    on: OnOpt = None,
    inventory: InventoryOpt = None,
    ssh_config: SshConfigOpt = None,
    accept_new_host_key: AcceptOpt = False,
) -> None:
    """Run the static checks of a profile: capture layers, widths, vocab, TP, memory, engine flags.
    A checkpoint given as a host path that this machine cannot see is read on the profile's first
    host (or on --on HOST), over SSH."""
    from specctl.flows import static
    from specctl.hosts.inventory import inventory_path, resolve_hosts

    output = _output(ctx, json_mode)
    report = static.check(
        profile,
        offline=offline,
        assume_convention=assume_convention,
        engine_python=engine_python,
        on_hosts=facts_on_hosts(on, inventory, ssh_config, accept_new_host_key),
    )
    if on and not engine_python:  # the host's own engine judges, as a deploy there would be judged
        report = engines_as_judge(
            report, resolve_hosts([on], inventory_path(inventory)), ssh_config, accept_new_host_key
        )
    failed = any(f.severity.value == "error" for f in report.findings)
    data = {
        "profile": str(profile),
        "ok": not failed,
        "findings": [f.to_dict() for f in report.findings],
        "sha256": report.inputs.profile_sha256,
        "facts": {role: s.to_dict() for role, s in report.facts.items()},
    }
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
    fmt: Annotated[
        Literal["sh", "json"], typer.Option("--format", help="Launch script (sh) or the whole plan (json).")
    ] = "sh",
    force: Annotated[bool, typer.Option("--force", help="Render even when checks find errors.")] = False,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
    assume_convention: AssumeOpt = None,
    engine_python: EnginePythonOpt = None,
    platform: Annotated[
        Literal["sh", "k8s"],
        typer.Option(
            "--platform",
            help="Launch scripts for hosts (sh), or Kubernetes manifests (k8s): a Deployment, or a LeaderWorkerSet "
            "for several nodes, with its Service and ConfigMap.",
        ),
    ] = "sh",
    target: Annotated[
        Literal["sh", "k8s"] | None,
        typer.Option("--target", hidden=True, help="The old name of --platform, still accepted."),
    ] = None,
    image: Annotated[
        str | None,
        typer.Option(
            "--image",
            rich_help_panel=_K8S,
            help="Container image (default: the engine's published image of the profile's version).",
        ),
    ] = None,
    name: Annotated[
        str | None,
        typer.Option("--name", rich_help_panel=_K8S, help="Name of the objects (default: from the profile name)."),
    ] = None,
    namespace: Annotated[
        str | None,
        typer.Option(
            "--namespace",
            "-n",
            rich_help_panel=_K8S,
            help="Namespace written into the objects (default: none, kubectl decides).",
        ),
    ] = None,
    secret_name: Annotated[
        str | None,
        typer.Option(
            "--secret-name",
            rich_help_panel=_K8S,
            help="Secret holding the profile's secrets, one key each (default: NAME-secrets).",
        ),
    ] = None,
    model_pvc: Annotated[
        str | None,
        typer.Option(
            "--model-pvc",
            rich_help_panel=_K8S,
            help="PersistentVolumeClaim for the checkpoints and the HF cache "
            "(default: an emptyDir, downloaded again at every pod start).",
        ),
    ] = None,
    model_mount: Annotated[
        str | None,
        typer.Option(
            "--model-mount",
            rich_help_panel=_K8S,
            show_default=K8S_MODEL_MOUNT,
            help="Where the model volume is mounted; local checkpoint paths must be under it.",
        ),
    ] = None,
    image_python: Annotated[
        str | None,
        typer.Option(
            "--image-python",
            rich_help_panel=_K8S,
            show_default=K8S_PYTHON,
            help="The image's interpreter, in place of the profile's engine.python.",
        ),
    ] = None,
    cluster: Annotated[
        str | None,
        typer.Option(
            "--cluster",
            rich_help_panel=_K8S,
            help="A `kind: kubernetes` entry of the inventory: its settings, which the flags above override.",
        ),
    ] = None,
    inventory: InventoryOpt = None,
) -> None:
    """Print the exact launch command(s) of a profile, deterministic and shell-quoted; or, with
    --platform k8s, the Kubernetes objects that run the same argv and environment."""
    from specctl.flows import static
    from specctl.plan.render import render_json, render_sh

    output = _output(ctx, json_mode)
    if target is not None:  # the option's old name: old command lines keep working
        if platform not in ("sh", target):
            raise InputError(
                f"--target {target} and --platform {platform} disagree",
                fix="pass --platform alone (--target is its old name)",
            )
        platform = target
        output.hint("[dim]--target is the old name of --platform; it is still accepted[/]")
    if platform == "k8s" and (node is not None or fmt != "sh"):
        raise InputError(
            "--node and --format choose among launch scripts; --platform k8s renders every node as one set of objects",
            fix="drop them (--json prints the objects as JSON)",
        )
    report = static.check(profile, offline=offline, assume_convention=assume_convention, engine_python=engine_python)
    # on Kubernetes the LeaderWorkerSet places the node ranks: the profile's hosts do not matter there
    errors = [
        f
        for f in report.findings
        if f.severity.value == "error" and not (platform == "k8s" and f.code == "parallel-hosts")
    ]
    if errors and not force:
        from specctl.cli.views import findings_view

        output.hint(findings_view(f"render refused for {profile}", errors))
        raise CheckFailed(
            f"{len(errors)} check error(s); nothing rendered", fix=f"fix them (specctl check {profile}) or pass --force"
        )
    if platform == "k8s":
        from specctl.plan import k8s

        site = _kubernetes_entry(cluster, inventory)
        options = k8s.K8sOptions(
            image=image or site.image or _published_image(report),
            name=name,
            namespace=namespace or site.namespace,
            secret_name=secret_name or site.secret_name,
            model_pvc=model_pvc or site.model_pvc,
            model_mount=model_mount or site.model_mount or K8S_MODEL_MOUNT,
            python=image_python or site.image_python or K8S_PYTHON,
        )
        objects = k8s.manifests(
            report.inputs,
            report.resolution,
            options,
            baseline=baseline,
            stage=_stage_program(report, options, baseline=baseline),
            materialise=k8s.MATERIALISE_SCRIPT.read_text(encoding="utf-8"),
        )
        output.raw(
            k8s.render_json(objects)
            if output.json_mode
            else k8s.render_yaml(objects, k8s.banner(report.inputs, options, baseline=baseline))
        )
        return
    plan = static.plan(report, baseline=baseline)
    nodes = plan.nodes
    if node is not None:
        if not 0 <= node < len(nodes):
            raise InputError(
                f"node {node} does not exist: the profile has {len(nodes)} node(s)",
                fix=f"use --node 0..{len(nodes) - 1}",
            )
        nodes = (nodes[node],)
    if output.json_mode or fmt == "json":
        output.raw(
            render_json(plan) if node is None else render_json(plan.__class__(**{**plan.__dict__, "nodes": nodes}))
        )
        return
    output.raw("\n".join(render_sh(plan, n) for n in nodes))
    if plan.overlay is not None:
        output.hint(
            f"# drafter overlay: {len(plan.overlay.links)} linked file(s) + config.json with "
            f"eagle_aux_hidden_state_layer_ids {plan.capture['ids'] if plan.capture else None} (see --format json)"
        )


def _kubernetes_entry(name: str | None, inventory: str | None) -> KubernetesCluster:
    """The inventory's `kind: kubernetes` entry `name` (an empty one when none is named)."""
    from specctl.hosts.inventory import inventory_path
    from specctl.profile import load_document
    from specctl.profile.inventory import Inventory, KubernetesCluster

    if name is None:
        return KubernetesCluster(kind="kubernetes")
    path = inventory_path(inventory)
    if path is None:
        raise InputError(f"--cluster {name} needs an inventory", fix="pass --inventory PATH (or set SPECCTL_INVENTORY)")
    entry = load_document(path, Inventory, "Inventory").model.clusters.get(name)
    if not isinstance(entry, KubernetesCluster):
        raise InputError(
            f"{path} has no `kind: kubernetes` cluster {name!r}",
            fix="add it under clusters: with `kind: kubernetes`, or drop --cluster",
        )
    return entry


def _published_image(report: CheckReport) -> str:
    p = report.inputs.profile
    image = report.inputs.engine.container_image(p.engine.version)
    if image is None:
        raise InputError(
            f"the {p.engine.name} engine publishes no container image",
            fix="pass --image with an image that has it installed",
        )
    return image


def _stage_program(report: CheckReport, options: K8sOptions, *, baseline: bool) -> PodProgram | None:
    """The pods' staging: the program a deploy runs on a host (release/_stage_host.py), with its
    records beside the cache on the model volume, online whatever the server's environment says."""
    from specctl.plan.k8s import PodProgram
    from specctl.release import staging

    checkpoints = staging.profile_checkpoints(report.inputs.profile, baseline=baseline)
    if not checkpoints:
        return None
    _, _, source, request = staging.command(
        options.python, f"{options.model_mount.rstrip('/')}/{APP_NAME}", checkpoints, "fetch"
    )
    return PodProgram(source, request, staging.staging_env({}, {}))
