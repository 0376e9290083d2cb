"""`specctl manifest ...`: drafter manifests."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specctl.cli._options import JsonOpt, LegacyOutOpt, OfflineOpt, command_output, out_file

app = typer.Typer(help="Drafter manifests: the layers a drafter was trained on.", no_args_is_help=True)


@app.command("import")
def import_(
    ctx: typer.Context,
    drafter: Annotated[
        str,
        typer.Argument(
            help="Drafter checkpoint: a directory, or an HF repo id as ORG/NAME@REVISION.", show_default=False
        ),
    ],
    target: Annotated[
        str,
        typer.Option(
            "--target",
            help="Target checkpoint the drafter was trained against (directory or ORG/NAME@REVISION).",
            show_default=False,
        ),
    ],
    convention: Annotated[
        str | None,
        typer.Option("--convention", help="How the drafter's ids are meant: specforge, sglang, vllm or canonical."),
    ] = None,
    training_state: Annotated[
        Path | None, typer.Option("--training-state", help="SpecForge training_state.pt or run config (JSON/YAML).")
    ] = None,
    engine_version: Annotated[
        str | None, typer.Option("--engine-version", help="sglang version, for --convention sglang.")
    ] = None,
    name: Annotated[
        str | None, typer.Option("--name", help="Manifest name (default: the drafter's directory name).")
    ] = None,
    out: Annotated[
        Path | None,
        typer.Option("--out", metavar="FILE", help="Write the manifest here (atomically) instead of stdout."),
    ] = None,
    legacy_out: LegacyOutOpt = None,
    json_mode: JsonOpt = False,
    offline: OfflineOpt = False,
) -> None:
    """Build a DrafterManifest from a drafter checkpoint; refuses to guess an ambiguous convention."""
    from specctl.flows.manifest_import import import_manifest, to_yaml, write_atomically
    from specctl.plan.manifest_import import CONVENTIONS

    output = command_output(ctx, json_mode)
    out = out_file(output, out, legacy_out)
    if convention is not None and convention not in CONVENTIONS:
        raise typer.BadParameter(f"use one of: {', '.join(CONVENTIONS)}", param_hint="--convention")
    data = import_manifest(
        drafter,
        target_ref=target,
        convention=convention,
        training_state=training_state,
        engine_version=engine_version,
        name=name,
        offline=offline,
    )
    if out is not None:
        write_atomically(out, to_yaml(data))
        output.hint(f"wrote {out}: capture layers {data['capture']['layers']} (width {data['capture']['width']})")
    if output.json_mode:
        output.result(data)
    elif out is None:
        output.raw(to_yaml(data))
