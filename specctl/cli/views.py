"""Renderables for plain data (findings, plans, validation results); the core never imports rich."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from specctl.plan.findings import Finding, Severity
from specctl.plan.plan import Plan

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def findings_view(title: str, findings: Sequence[Finding]) -> RenderableType:
    """One block per finding: severity and code, the message, the fix."""
    counts = {s: sum(f.severity is s for f in findings) for s in Severity}
    verdict = "FAIL" if counts[Severity.ERROR] else "ok"
    head = Text.assemble((title, "bold"), "  ", (verdict, "bold red" if counts[Severity.ERROR] else "bold green"),
                         f"  ({counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} info)")
    blocks: list[RenderableType] = [head]
    for f in findings:
        where = f"  [{f.field}]" if f.field else ""
        blocks.append(Text.assemble("  ", (f"{f.severity.value:<7}", _STYLE[f.severity]), " ", (f.code, "bold"), (where, "dim")))
        blocks.append(Padding(Text(f.message), (0, 0, 0, 10)))
        blocks.append(Padding(Text.assemble(("fix: ", "bold"), f.fix), (0, 0, 0, 10)))
    return Group(*blocks)


def capture_view(capture: dict[str, object] | None) -> RenderableType:
    from rich.table import Table

    if not capture:
        return Text("")
    table = Table(title="capture", show_header=True, box=None, pad_edge=False)
    table.add_column("served ids")
    table.add_column("origin")
    table.add_column("captures outputs of")
    table.add_column("drafter trained on")
    table.add_column("match")
    table.add_row(str(capture.get("ids")), str(capture.get("origin")), str(capture.get("layers")),
                  str(capture.get("needed_layers")), "yes" if capture.get("matches") else "NO")
    return table


def plan_view(plan: Plan) -> RenderableType:
    from rich.table import Table

    table = Table(title=f"{plan.profile} v{plan.version}  {plan.engine} {plan.engine_version}", box=None, pad_edge=False)
    table.add_column("node")
    table.add_column("host")
    table.add_column("argv")
    for node in plan.nodes:
        table.add_row(str(node.rank), node.host or "-", " ".join(node.argv))
    return table


def validation_view(results: Sequence[tuple[str, str, str | None]]) -> RenderableType:
    from rich.table import Table

    table = Table(box=None, pad_edge=False, show_header=True)
    table.add_column("file")
    table.add_column("kind")
    table.add_column("result")
    for file, kind, problem in results:
        table.add_row(file, kind, Text("ok", "green") if problem is None else Text(problem, "red"))
    return table
