"""Renderables for plain data (findings, plans, validation results); the core never imports rich."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from specctl.cli._output import Output
from specctl.plan.findings import Finding, Severity
from specctl.plan.plan import Plan

if TYPE_CHECKING:
    from specctl.flows.report import HostReport

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


def _num(value: object, digits: int = 3) -> str:
    if not isinstance(value, (int, float)):
        return "-"
    return f"{value:.0f}" if abs(value) >= 10 ** digits else f"{value:.{digits}g}"


def verdict_view(host: str, verdict: dict[str, object] | None) -> RenderableType:
    """One host's verdict: each gate's measured value and interval beside its threshold, then drift and findings."""
    from rich.table import Table

    if not verdict:
        return Text(f"{host}: no verdict")
    passed = bool(verdict.get("passed"))
    summary = verdict.get("summary") or {}
    assert isinstance(summary, dict)
    table = Table("gate", "measured", "95% interval", "threshold", "result", title_justify="left",
                  title=f"{host}: {verdict.get('profile')} v{verdict.get('version')} release {verdict.get('release')}  "
                        f"{'PASS' if passed else 'FAIL'}  ({summary.get('requests', 0)} requests"
                        f"{', stopped early: decided' if verdict.get('stopped_early') else ''})")
    for g in verdict.get("gates") or []:  # type: ignore[attr-defined]
        iv = g.get("interval") or {}
        result = ("pass" if g["passed"] else "FAIL") + ("" if g["decided"] else " (undecided)")
        table.add_row(g["name"], _num(iv.get("estimate")), f"[{_num(iv.get('low'))}, {_num(iv.get('high'))}] {iv.get('kind', '')}" if iv else g.get("note", "-"),
                      f"{g['op']} {g['threshold']}", result)
    for label, key in (("accept length", "accept_length"), ("acceptance rate", "acceptance_rate"),
                       ("decode tok/s", "decode_tokens_per_s"), ("speedup", "speedup"), ("TTFT s", "ttft_s")):
        iv = summary.get(key)
        if isinstance(iv, dict) and not any(g["name"] == key for g in verdict.get("gates") or []):  # type: ignore[attr-defined]
            table.add_row(f"[dim]{label}[/]", _num(iv.get("estimate")), f"[{_num(iv.get('low'))}, {_num(iv.get('high'))}]", "-", "info")
    blocks: list[RenderableType] = [table]
    for d in verdict.get("drift") or []:  # type: ignore[attr-defined]
        blocks.append(Text.assemble(("  drift ", "bold red"), f"{d['field']}: plan {d['expected']!r}, server {d['reported']!r}"))
    for f in verdict.get("findings") or []:  # type: ignore[attr-defined]
        if f.get("severity") == "error":
            blocks.append(Text.assemble(("  error ", "bold red"), (f["code"], "bold"), f" {f['message']}  fix: {f['fix']}"))
    return Group(*blocks)


def show_reports(output: Output, reports: Sequence[HostReport], title: str) -> None:
    """Every host's verdict for people, or the reports as JSON."""
    views: list[RenderableType] = []
    for r in reports:
        views.append(verdict_view(r.host, r.verdict) if r.verdict and r.verdict.get("gates") is not None else f"{r.host}: {r.detail}")
        if r.rolled_back_to:
            views.append(f"{r.host}: rolled back to {r.rolled_back_to}")
            views.append(verdict_view(r.host, r.rollback_verdict))
    output.result({"title": title, "hosts": [r.__dict__ for r in reports]}, Group(*views))


def stages_view(events: Sequence[Any]) -> RenderableType:
    """A run's stage boundaries per host: each stage with how it ended and how long it took."""
    from datetime import datetime

    from rich.table import Table

    table = Table("host", "stage", "result", "took", "detail", title="stages", title_justify="left")
    began: dict[tuple[str, str], str] = {}
    for e in events:
        if e.event == "began":
            began[(e.host, e.stage)] = e.at
            continue
        start = began.get((e.host, e.stage))
        took = "-"
        if start and e.event in ("ended", "failed"):
            seconds = (datetime.fromisoformat(e.at.replace("Z", "+00:00")) - datetime.fromisoformat(start.replace("Z", "+00:00")))
            took = f"{seconds.total_seconds():.1f} s"
        style = {"failed": "bold red", "undo-failed": "bold red", "undone": "yellow"}.get(e.event, "")
        table.add_row(e.host, e.stage, Text(e.event, style=style), took, Text(e.detail or ""))
    return table
