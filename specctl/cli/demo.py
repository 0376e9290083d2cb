"""`specctl demo`: the product's workflow on this machine (reference engine, tiny models, `local` host)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from specctl.cli._options import JsonOpt, command_output
from specctl.errors import CheckFailed

if TYPE_CHECKING:
    from rich.console import RenderableType

    from specctl.cli._output import Output
    from specctl.flows.demo import DemoResult, DemoStep


def register(app: typer.Typer) -> None:
    app.command("demo")(demo)


def demo(
    ctx: typer.Context,
    workdir: Annotated[
        Path | None,
        typer.Option(
            "--workdir", help="Where profiles, inventory, releases and ledger go (default: a data directory)."
        ),
    ] = None,
    port: Annotated[int, typer.Option("--port", help="Port of the local server.")] = 31000,
    requests: Annotated[
        int, typer.Option("--requests", min=8, help="Most requests per verify (it stops once the gate is decided).")
    ] = 24,
    json_mode: JsonOpt = False,
) -> None:
    """Deploy v1 of a profile for the tiny models here (verified), measure the baseline,
    deploy v2 with a same-width wrong capture list and watch verify fail and roll back by itself;
    then the ledger's runs, the diff of the two deploys, and the check that would have refused v2."""
    from rich.status import Status

    from specctl.cancel import on_signals
    from specctl.flows.demo import run_demo
    from specctl.settings import data_dir

    output = command_output(ctx, json_mode)
    where = workdir or data_dir() / "demo"
    status = Status("starting", console=output.err)
    if not output.json_mode:
        output.hint(
            f"work directory {where}: profiles/, manifests/, hosts.yaml, ledger.db and the local host's releases"
        )
        status.start()

    def shown(step: DemoStep) -> None:
        if output.json_mode:
            return
        status.stop()
        _show(output, step)
        status.start()

    try:
        with on_signals() as cancel:
            result = run_demo(
                where,
                port=port,
                requests=requests,
                cancel=cancel,
                on_step=shown,
                progress=lambda host, text: status.update(f"{host}: {text}"),
            )
    finally:
        status.stop()
    if output.json_mode:
        output.result(result.to_dict())
    else:
        output.out.print(_summary(result))
        output.out.print("\nnext, in the work directory the demo left (nothing runs now):")
        output.raw("".join(f"  {line}\n" for line in result.next_commands))
    if not result.as_expected:
        raise CheckFailed(
            "the demo did not go as expected (v1 should pass its verify; v2 fail it and roll back to v1; "
            "watch find v1 ok on chat traffic and degraded on document tasks)",
            fix="the steps above show what each measured; on a loaded machine run it again",
        )


def _show(output: Output, step: DemoStep) -> None:
    """One step: the command it stands for, then what that command would print."""
    from rich.text import Text

    output.out.print(Text(f"\n$ {step.command}", style="bold"), soft_wrap=True)
    output.out.print(_view(step, output.out.width))


def _view(step: DemoStep, width: int) -> RenderableType:
    from datetime import UTC, datetime

    from rich.text import Text

    from specctl.cli import views
    from specctl.ledger.history import short_ids
    from specctl.plan.findings import Finding, Severity

    data: dict[str, Any] = step.data
    if step.name.startswith("check"):
        findings = [Finding(**{**f, "severity": Severity(f["severity"])}) for f in data["findings"]]
        return views.findings_view(f"{data['name']} v{data['version']}", findings)
    if step.name.startswith("deploy"):
        return views.reports_view(data["hosts"])
    if step.name == "baseline":
        return views.baseline_view(data["baselines"])
    if step.name == "runs":
        rows = data["runs"]
        short = short_ids([r["id"] for r in rows] + [r["parent"] for r in rows if r["parent"]])
        return views.runs_view(rows, title="runs", wide=False, width=width, now=datetime.now(UTC), short=short)
    if step.name == "diff":
        return views.diff_view(data["a"], data["b"], data)
    if step.name.startswith("watch"):
        return views.watch_view(data["profile"], data["hosts"])
    lines = [
        f"{host}: " + (f"FAILED: {r}" if isinstance(r, str) else f"stopped {', '.join(r)}" if r else "nothing running")
        for host, r in data["stopped"].items()
    ]
    return Text("\n".join(lines))


def _summary(result: DemoResult) -> RenderableType:
    """The headline numbers of the three measured runs; speedup is shown, not gated (it swings on a shared CPU)."""
    from rich.console import Group
    from rich.table import Table
    from rich.text import Text

    from specctl.flows.demo import MIN_ACCEPT_LENGTH

    table = Table(
        title="\nmeasured on the reference engine (CPU, this machine)",
        title_justify="left",
        box=None,
        pad_edge=False,
        header_style="bold",
    )
    for column in ("run", "accept len", "acceptance", "tok/s", "speedup", "verify"):
        table.add_column(column, justify="left" if column in ("run", "verify") else "right")
    for key, row in result.summary.items():
        if key.startswith("watch"):  # a window of live traffic: its state in place of a verify
            verdict = row["state"]  # what watch did is said below the table
        else:
            verdict = "-" if row["passed"] is None else "pass" if row["passed"] else "FAIL"
        table.add_row(
            row["label"],
            _fmt(row["accept_length"], "{:.2f}"),
            _fmt(row.get("acceptance_rate"), "{:.2f}"),
            _fmt(row.get("output_tokens_per_s"), "{:.0f}"),
            _fmt(row.get("speedup"), "{:.2f}x"),
            verdict,
        )
    wrong = result.summary.get("v2", {})
    notes = []
    if wrong.get("rolled_back_to"):
        notes.append(f"v2 failed verify (accept length gate {MIN_ACCEPT_LENGTH}) and the host rolled back to v1")
    if result.summary.get("watch-shift", {}).get("state") == "degraded":
        notes.append("watch: v1 was ok on chat traffic, degraded on document tasks: the host now serves plain")
    return Group(table, Text("\n".join(notes))) if notes else table


def _fmt(value: object, pattern: str) -> str:
    return "-" if not isinstance(value, (int, float)) else pattern.format(value)
