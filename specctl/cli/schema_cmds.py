"""`specctl schema KIND`: the JSON Schema of a file format, for editors and other tools."""

from __future__ import annotations

from typing import Annotated, Literal

import typer

from specctl.cli._options import JsonOpt, command_output

# the names of specctl.profile.schema.SCHEMA_KINDS, spelled here so that building the command (and
# completing its argument) loads no model
SchemaKind = Literal["profile", "manifest", "inventory"]


def register(app: typer.Typer) -> None:
    app.command("schema")(schema)


def schema(
    ctx: typer.Context,
    kind: Annotated[SchemaKind, typer.Argument(metavar="KIND", help="The file format.", show_default=False)],
    json_mode: JsonOpt = False,
) -> None:
    """Print the JSON Schema (draft 2020-12) of a file format, as docs/schema/ publishes it (JSON in
    every mode)."""
    from specctl.profile.schema import schema_text

    command_output(ctx, json_mode).raw(schema_text(kind))
