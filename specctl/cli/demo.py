"""`specctl demo`: the embedded default on this machine (reference engine, tiny models, `local` host)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from specctl.cli._options import JsonOpt
from specctl.cli._output import Output


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    ctx: typer.Context,
    workdir: Annotated[Path | None, typer.Option("--workdir", help="Where profiles and releases go (default: a data directory).")] = None,
    port: Annotated[int, typer.Option("--port", help="Port of the local server.")] = 31000,
    requests: Annotated[int, typer.Option("--requests", help="Requests per measurement.")] = 8,
    json_mode: JsonOpt = False,
) -> None:
    """Deploy the tiny models on the reference engine here, measure speculation against the baseline,
    then show what a same-width wrong capture list does and that `check` catches it."""
    from rich.status import Status
    from rich.table import Table

    from specctl.cli.views import findings_view
    from specctl.flows.demo import run_demo
    from specctl.settings import data_dir

    output: Output = ctx.obj
    output.json_mode = output.json_mode or json_mode
    where = workdir or data_dir() / "demo"
    status = Status("starting", console=output.err)
    if not output.json_mode:
        status.start()
    try:
        result = run_demo(where, port=port, requests=requests,
                          say=lambda line: output.hint(f"[bold]>[/] {line}"),
                          progress=lambda stage: status.update(f"local: {stage}"))
    finally:
        status.stop()
    if output.json_mode:
        output.result(result.to_dict())
        return
    for version, findings in result.checks.items():
        output.out.print(findings_view(f"specctl check {version}", findings))
    table = Table(title="measured on the reference engine (CPU)", title_justify="left")
    for column in ("run", "accept length", "acceptance", "tokens/s", "speedup", "ready in"):
        table.add_column(column, justify="left" if column == "run" else "right")
    for label, run in result.runs.items():
        table.add_row(label, _fmt(run["mean_accept_length"]), _fmt(run["acceptance_rate"]), _fmt(run["output_tokens_per_s"]),
                      _fmt(run["speedup"], "x"), _fmt(run["startup_s"], " s"))
    output.out.print(table)
    output.out.print(f"profiles, manifest and releases: {where}")


def _fmt(value: object, unit: str = "") -> str:
    return "-" if value is None else f"{value}{unit}"
