"""Renderables for plain data (findings, plans, validation results); the core never imports rich."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

from rich.console import Group, RenderableType
from rich.padding import Padding
from rich.text import Text

from specctl.cli._output import Output
from specctl.cli.figures import figure
from specctl.plan.findings import Finding, Severity
from specctl.plan.plan import Plan

if TYPE_CHECKING:
    from specctl.flows.report import HostReport

_STYLE = {Severity.ERROR: "bold red", Severity.WARNING: "yellow", Severity.INFO: "cyan"}


def findings_view(title: str, findings: Sequence[Finding]) -> RenderableType:
    """One block per finding: severity and code, the message, the fix."""
    counts = {s: sum(f.severity is s for f in findings) for s in Severity}
    verdict = "FAIL" if counts[Severity.ERROR] else "ok"
    head = Text.assemble(
        (title, "bold"),
        "  ",
        (verdict, "bold red" if counts[Severity.ERROR] else "bold green"),
        f"  ({counts[Severity.ERROR]} error(s), {counts[Severity.WARNING]} warning(s), {counts[Severity.INFO]} info)",
    )
    blocks: list[RenderableType] = [head]
    for f in findings:
        where = f"  [{f.field}]" if f.field else ""
        blocks.append(
            Text.assemble("  ", (f"{f.severity.value:<7}", _STYLE[f.severity]), " ", (f.code, "bold"), (where, "dim"))
        )
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
    table.add_row(
        str(capture.get("ids")),
        str(capture.get("origin")),
        str(capture.get("layers")),
        str(capture.get("needed_layers")),
        "yes" if capture.get("matches") else "NO",
    )
    return table


def plan_view(plan: Plan) -> RenderableType:
    from rich.table import Table

    table = Table(
        title=f"{plan.profile} v{plan.version}  {plan.engine} {plan.engine_version}", box=None, pad_edge=False
    )
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
    return f"{value:.0f}" if abs(value) >= 10**digits else f"{value:.{digits}g}"


def verdict_view(host: str, verdict: dict[str, object] | None) -> RenderableType:
    """One host's verdict: each gate's measured value and interval beside its threshold, then drift and findings."""
    from rich.table import Table

    from specctl.verdict.summary import current

    if not verdict:
        return Text(f"{host}: no verdict")
    passed = bool(verdict.get("passed"))
    summary = verdict.get("summary") or {}
    assert isinstance(summary, dict)
    summary = current(summary)
    several = len(verdict.get("points") or []) > 1  # type: ignore[arg-type]
    table = Table(
        "gate",
        "measured",
        "interval (95 % over all points)" if several else "95% interval",
        "threshold",
        "result",
        title_justify="left",
        title=f"{host}: {verdict.get('profile')} v{verdict.get('version')} release {verdict.get('release')}  "
        f"{'PASS' if passed else 'FAIL'}  ({summary.get('requests', 0)} requests"
        f"{', stopped early: decided' if verdict.get('stopped_early') else ''})",
    )
    for g in verdict.get("gates") or []:  # type: ignore[attr-defined]
        iv = g.get("interval") or {}
        result = ("pass" if g["passed"] else "FAIL") + ("" if g["decided"] else " (undecided)")
        name = g["name"] + (f" @{g['concurrency']}" if g.get("concurrency") is not None else "")
        table.add_row(
            name,
            _num(iv.get("estimate")),
            f"[{_num(iv.get('low'))}, {_num(iv.get('high'))}] {iv.get('kind', '')}" if iv else g.get("note", "-"),
            f"{g['op']} {g['threshold']}",
            result,
        )
    points = verdict.get("points") or [
        {"concurrency": None, "summary": summary}
    ]  # a verdict from before operating points
    for point in points:  # type: ignore[attr-defined]
        c = point.get("concurrency")
        at = f" @{c}" if c is not None and len(points) > 1 else ""  # type: ignore[arg-type]
        point_summary = current(point.get("summary") or {})
        per_node = (
            point_summary.get("acceptance_rate_per") == "draft-tree node"
        )  # eagle_topk > 1: sglang counts tree nodes
        for label, key in (
            ("accept length", "accept_length"),
            ("acceptance rate per tree node" if per_node else "acceptance rate", "acceptance_rate"),
            ("output tok/s per request", "output_tokens_per_s"),
            ("decode tok/s", "decode_tokens_per_s"),
            ("speedup (output tok/s)", "speedup"),
            ("TTFT s", "ttft_s"),
            ("inter-token s", "inter_token_latency_s"),
        ):
            iv = point_summary.get(key)
            gated = any(g["name"] == key and g.get("concurrency") in (None, c) for g in verdict.get("gates") or [])  # type: ignore[attr-defined]
            if isinstance(iv, dict) and not gated:
                table.add_row(
                    f"[dim]{label}{at}[/]",
                    _num(iv.get("estimate")),
                    f"[{_num(iv.get('low'))}, {_num(iv.get('high'))}]",
                    "-",
                    "info",
                )
        for label, key in (("total tok/s", "wall_tokens_per_s"), ("drafts per verify", "drafts_per_verify")):
            if point_summary.get(key) is not None:
                table.add_row(f"[dim]{label}{at}[/]", _num(point_summary[key]), "-", "-", "info")
    blocks: list[RenderableType] = [table]
    for d in verdict.get("drift") or []:  # type: ignore[attr-defined]
        blocks.append(
            Text.assemble(("  drift ", "bold red"), f"{d['field']}: plan {d['expected']!r}, server {d['reported']!r}")
        )
    for f in verdict.get("findings") or []:  # type: ignore[attr-defined]
        if f.get("severity") == "error":
            blocks.append(
                Text.assemble(("  error ", "bold red"), (f["code"], "bold"), f" {f['message']}  fix: {f['fix']}")
            )
    return Group(*blocks)


def reports_view(hosts: Sequence[Mapping[str, Any]]) -> RenderableType:
    """Each host's verdict (the HostReport data a deploy, verify or rollback prints under --json),
    and the verdict of the release it rolled back to."""
    views: list[RenderableType] = []
    for r in hosts:
        verdict = r.get("verdict")
        views.append(
            verdict_view(r["host"], verdict)
            if verdict and verdict.get("gates") is not None
            else Text(f"{r['host']}: {r['detail']}" + (f" (fix: {r['fix']})" if r.get("fix") else ""))
        )
        back = r.get("rolled_back_to")
        if back and back != r.get("release"):  # a rollback's own verdict is the one above
            views.append(Text(f"{r['host']}: rolled back to {back}"))
            views.append(verdict_view(r["host"], r.get("rollback_verdict")))
    return Group(*views)


def show_reports(output: Output, reports: Sequence[HostReport], title: str, *, wide: bool = False, **data: Any) -> None:
    """The reports as JSON (with `data`), or for people: each host's gates (one host, or `wide`),
    then the recap."""
    from specctl.cli.recap import recap_view

    hosts = [r.__dict__ for r in reports]
    recap = recap_view(hosts, title=title, width=output.out.width, wide=wide)
    gates = [r for r in hosts if r.get("verdict") and r["verdict"].get("gates") is not None]
    shown = Group(reports_view(gates), Text(""), recap) if gates and (wide or len(hosts) == 1) else recap
    output.result({"title": title, **data, "hosts": hosts}, shown, fit=not wide)


def baseline_view(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """Each host's baseline run per operating point: output throughput per request (its interval)
    and the server's total (the data `baseline --json` prints)."""
    from rich.table import Table

    table = Table(
        "host",
        "baseline run",
        "concurrency",
        "requests",
        "output tok/s per request (95% interval)",
        "total tok/s",
        title="baseline",
        title_justify="left",
    )
    for r in rows:
        t = r["output_tokens_per_s"] or {}
        table.add_row(
            r["host"],
            r["run"],
            str(r.get("concurrency", 1)),
            str(r["requests"]),
            f"{t.get('estimate', 0):.1f} [{t.get('low', 0):.1f}, {t.get('high', 0):.1f}]",
            _num(r.get("wall_tokens_per_s")),
        )
    return table


def _window_text(row: Mapping[str, Any]) -> tuple[str, str, str]:
    """(accept length with its interval, floor, why) of one host's watch window (HostWindow.to_dict)."""
    verdict = row.get("verdict") or {}
    interval = verdict.get("interval")
    measured = f"{interval['estimate']:.2f} [{interval['low']:.2f}, {interval['high']:.2f}]" if interval else "-"
    floor = verdict.get("floor")
    why = row.get("error") or row.get("reason") or verdict.get("reason") or ""  # reason: down, unreadable too
    if row.get("action"):
        why += f"; {row['action']}"
    return measured, "-" if floor is None else f"{floor:.2f}", why


def watch_view(profile: str, rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """One watch window per host: its state, accept length (interval), the floor it is held to, why."""
    from rich.table import Table

    table = Table(
        "host", "release", "state", "accept length", "floor", "why", title=f"watch {profile}", title_justify="left"
    )
    for r in rows:
        measured, floor, why = _window_text(r)
        state = r["state"].upper() if r["state"] in ("degraded", "unreachable", "down") else r["state"]
        table.add_row(r["host"], r.get("release") or "-", state, measured, floor, why)
    return table


def windows_view(rows: Sequence[Mapping[str, Any]]) -> RenderableType:
    """A watch run's windows as the ledger keeps them (WatchWindow rows): when, state, accept length, action."""
    from rich.table import Table

    table = Table("ended", "host", "release", "state", "look", "accept length", "floor", "action", title="windows")
    for w in rows:
        measured = f"{w['estimate']:.2f} [{w['low']:.2f}, {w['high']:.2f}]" if w.get("estimate") is not None else "-"
        table.add_row(
            w["ended_at"],
            w["host"],
            w["release"],
            w["state"],
            str(w["look"] or "-"),
            measured,
            "-" if w.get("floor") is None else f"{w['floor']:.2f}",
            w.get("action") or "",
        )
    return table


def watch_line(result: Any) -> str:
    """One line per host and window, for a watch that keeps running."""
    row = result.to_dict()
    measured, floor, why = _window_text(row)
    return f"{row['host']} {row.get('release') or '-'}: {row['state']} accept length {measured} floor {floor}: {why}"


def steps_view(events: Sequence[Any]) -> RenderableType:
    """A run's step boundaries per host: each step with how it ended and how long it took."""
    from rich.table import Table

    table = Table("host", "step", "result", "took", "detail", title="steps", title_justify="left")
    began: dict[tuple[str, str], str] = {}
    for e in events:
        if e.event == "began":
            began[(e.host, e.step)] = e.at
            continue
        start = began.get((e.host, e.step))
        took = "-"
        if start and e.event in ("ended", "failed"):
            seconds = datetime.fromisoformat(e.at.replace("Z", "+00:00")) - datetime.fromisoformat(
                start.replace("Z", "+00:00")
            )
            took = f"{seconds.total_seconds():.1f} s"
        style = {"failed": "bold red", "undo-failed": "bold red", "undone": "yellow"}.get(e.event, "")
        table.add_row(e.host, e.step, Text(e.event, style=style), took, Text(e.detail or ""))
    return table


def ago(at: str, now: datetime) -> str:
    """An ISO time as people say it relative to now: "12 s ago", "3 min ago", "5 h ago", "2 d ago"."""
    seconds = max(0, int((now - _when(at)).total_seconds()))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{seconds // size} {unit} ago"
    return f"{seconds} s ago"


def _when(at: str) -> datetime:
    return datetime.fromisoformat(at.replace("Z", "+00:00"))


def _figure(row: Mapping[str, Any], key: str, *, suffix: str = "") -> str:
    """A figure of a run or host (`metrics` data) with its interval, where one was recorded."""
    iv = (row.get("intervals") or {}).get(key) or {}
    return figure(row.get(key), iv.get("low"), iv.get("high"), suffix=suffix)


def _result(row: Mapping[str, Any]) -> str:
    """A run's verdict where it judged something, else how it ended."""
    if row.get("passed") is not None:
        return "pass" if row["passed"] else "FAIL"
    status = str(row["status"])
    return "ok" if status == "succeeded" else status


def _verdict(passed: object) -> str:
    return "-" if passed is None else ("pass" if passed else "FAIL")


def _host_rows(row: Mapping[str, Any], *, wide: bool) -> tuple[list[Mapping[str, Any]], int]:
    """The hosts of a several-host run to show under it, and how many more agree with its figure.

    `wide`: every host. Narrow: a host that FAILED, measured nothing, or whose accept length or
    tok/s interval leaves out the run's pooled estimate; the rest are one count ("3 hosts agree"),
    so a run of a hundred healthy hosts takes two lines and a bad host still shows. Where
    the run has no pooled figure every host is shown: its own figures are all there is. A run that
    measured nothing on any host and failed on none shows no hosts."""
    hosts: list[Mapping[str, Any]] = list(row.get("per_host") or [])
    if len(hosts) < 2:
        return [], 0
    measured = [h for h in hosts if any(h.get(k) is not None for k in (row.get("intervals") or {}))]
    if not measured and all(h.get("passed") is not False for h in hosts):
        return [], 0
    if wide:
        return hosts, 0
    pooled = row.get("pooled") is not None and any(
        row.get(k) is not None for k in ("accept_length", "output_tokens_per_s")
    )

    def agrees(h: Mapping[str, Any]) -> bool:
        if not pooled or h.get("passed") is False or h not in measured:
            return False
        for key in ("accept_length", "output_tokens_per_s"):
            iv = (h.get("intervals") or {}).get(key) or {}
            if row.get(key) is None:
                continue
            if not isinstance(iv.get("low"), (int, float)) or not iv["low"] <= row[key] <= iv["high"]:
                return False
        return True

    shown = [h for h in hosts if not agrees(h)]
    return shown, len(hosts) - len(shown)


def runs_view(
    rows: Sequence[Mapping[str, Any]], *, title: str, wide: bool, width: int, now: datetime, short: Mapping[str, str]
) -> RenderableType:
    """The ledger's runs (the data `runs --json` prints), one a line. Narrow: the short id (which
    `show`, `diff` and `rollback --to` take back), how long ago, kind, profile and version, the
    verdict, accept length and tokens/s with their intervals; columns go, least needed first, until
    the table fits the terminal, and no cell is ever cut short. `wide`: every column, whole ids,
    absolute times. A run measured on several hosts shows its pooled figures, and under it its
    hosts (`_host_rows` says which), each with its own."""
    from rich import box
    from rich.table import Table

    def when(row: Mapping[str, Any]) -> str:
        return _when(row["started_at"]).strftime("%Y-%m-%d %H:%M:%S")

    def took(row: Mapping[str, Any]) -> str:
        if not row.get("finished_at"):
            return "-"
        return f"{(_when(row['finished_at']) - _when(row['started_at'])).total_seconds():.0f} s"

    def kind(row: Mapping[str, Any], name: Mapping[str, str]) -> str:
        parent = row.get("parent")  # "←", one column narrower than "<-": a rollback's row still fits 80
        return str(row["kind"]) + (f" ← {name.get(parent, parent)}" if parent else "")

    def profile(row: Mapping[str, Any]) -> str:
        return f"{row['profile']} v{row['version']}" if row.get("profile") else "-"

    whole = {r["id"]: r["id"] for r in rows}
    figures: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = (
        [
            ("accept len", lambda r: _figure(r, "accept_length")),
            ("acceptance", lambda r: _figure(r, "acceptance_rate")),
            ("tok/s", lambda r: _figure(r, "output_tokens_per_s")),
            ("speedup", lambda r: _figure(r, "speedup", suffix="x")),
            ("TTFT s", lambda r: _figure(r, "ttft_s")),
        ]
        if wide
        else [
            ("accept", lambda r: _figure(r, "accept_length")),
            ("tok/s", lambda r: _figure(r, "output_tokens_per_s")),
        ]
    )
    columns: list[tuple[str, Callable[[Mapping[str, Any]], str]]] = (
        [
            ("run", lambda r: str(r["id"])),
            ("kind", lambda r: kind(r, whole)),
            ("profile", profile),
            ("hosts", lambda r: ",".join(r["hosts"]) or "-"),
            ("status", lambda r: str(r["status"])),
            ("verdict", lambda r: _verdict(r.get("passed"))),
            *figures,
            ("started (UTC)", when),
            ("took", took),
        ]
        if wide
        else [
            ("run", lambda r: short.get(r["id"], str(r["id"]))),
            ("when", lambda r: ago(r["started_at"], now)),
            ("kind", lambda r: kind(r, short)),
            ("profile", profile),
            ("result", _result),
            *figures,
        ]
    )
    names = [name for name, _ in columns]
    host_column = "hosts" if wide else "profile"  # a host's name sits under its run's
    cells = []
    for r in rows:
        cells.append([show(r) for _, show in columns])
        shown, agreeing = _host_rows(r, wide=wide)
        for h in shown:
            mine = {host_column: f"└ {h['host']}", ("verdict" if wide else "result"): _verdict(h.get("passed"))}
            mine |= {name: show(h) for name, show in figures}
            cells.append([mine.get(name, "") for name in names])
        if agreeing:
            label = f"└ {agreeing} {'more ' if shown else ''}" + ("hosts agree" if agreeing > 1 else "host agrees")
            cells.append([label if name == host_column else "" for name in names])
    if not wide:
        for dropped in ("when", "tok/s", "accept"):  # least needed first
            widths = [max([len(n), *(len(row[i]) for row in cells)]) for i, n in enumerate(names)]
            if sum(widths) + 2 * (len(names) - 1) <= width:
                break
            i = names.index(dropped)
            names.pop(i)
            for row in cells:
                row.pop(i)
    numeric = {"accept len", "acceptance", "tok/s", "speedup", "TTFT s", "accept", "took"}
    table = Table(box=box.HEAVY_HEAD if wide else None, pad_edge=wide, header_style="bold")
    for name in names:
        table.add_column(name, justify="right" if name in numeric else "left", overflow="fold")
    for row in cells:
        table.add_row(*row)
    return Group(Text(title, overflow="fold"), table)  # a title of its own: a long ledger path never narrows the table


def _value(value: object) -> str:
    """A diffed value as JSON, a measured float to four significant digits."""
    return f"{value:.4g}" if isinstance(value, float) else json.dumps(value)


def _bounds(interval: Mapping[str, Any] | None) -> tuple[object, object]:
    return (interval or {}).get("low"), (interval or {}).get("high")


def diff_view(a: str, b: str, changes: Mapping[str, Any]) -> RenderableType:
    """What differs between two runs (the data `diff --json` prints): profile fields, capture, host
    facts and measurements side by side (the runs named once, above, as a and b, so values keep the
    width), then the launch command's changed arguments. Measurements carry their intervals: the
    run's figure (pooled where several hosts measured), then each host both runs have."""
    from rich.table import Table

    views: list[RenderableType] = [Text(f"a  {a}\nb  {b}")]
    for section in ("profile", "capture", "facts"):
        table = Table("field", "a", "b", title=section, title_justify="left")
        for row in changes[section]:
            table.add_row(row["field"], _value(row["a"]), _value(row["b"]))
        views.append(table if changes[section] else Text(f"{section}: no difference"))
    measured = [r for r in changes["measurements"] if r["a"] is not None or r["b"] is not None]
    by_host = any(r.get("host") for r in measured)
    table = Table(
        "measured (95% intervals)",
        "a",
        "b",
        title="measurements: per host both runs have, then pooled" if by_host else "measurements",
        title_justify="left",
        box=None,
        pad_edge=False,
    )
    group: object = False
    for row in measured:
        if by_host and row.get("host") != group:  # per host, then the runs' pooled figures
            group = row.get("host")
            table.add_row(Text(str(group or "pooled"), style="bold"), "", "")
        table.add_row(
            ("  " if by_host else "") + row["field"],
            figure(row["a"], *_bounds(row.get("a_interval"))),
            figure(row["b"], *_bounds(row.get("b_interval"))),
        )
    views.append(table if measured else Text("measurements: none in either run"))
    for c in changes["commands"]:
        views.append(Text(f"command, node {c['node']}:\n  " + "\n  ".join(c["changed"])))
    if not changes["commands"]:
        views.append(Text("commands: no difference"))
    return Group(*views)


_POOLED_ROWS = (
    ("accept length", "accept_length"),
    ("acceptance rate", "acceptance_rate"),
    ("output tok/s per request", "output_tokens_per_s"),
    ("decode tok/s", "decode_tokens_per_s"),
    ("speedup (output tok/s)", "speedup"),
    ("TTFT s", "ttft_s"),
    ("inter-token s", "inter_token_latency_s"),
)


def pooled_view(pooled: Mapping[str, Any], gates: Sequence[Mapping[str, Any]]) -> RenderableType:
    """A several-host run's requests pooled (`history.pool_run`): per operating point each figure
    with its interval beside the gate the hosts were held to (`gates`: one host's verdict gates),
    the hosts' summed total tok/s, and what was not pooled."""
    from rich.table import Table

    points = pooled["points"]
    several = len(points) > 1
    first = points[0]["summary"] if points else None
    table = Table(
        "measured",
        "pooled",
        "interval (95 % over all points)" if several else "95% interval",
        "gate",
        title=f"pooled over {', '.join(pooled['hosts'])}"
        + (f"  ({first['requests']} requests)" if first and not several else ""),
        title_justify="left",
    )
    for point in points:
        c, summary = point["concurrency"], point["summary"]
        at = f" @{c}" if several else ""
        if summary is None:
            table.add_row(f"every figure{at}", "-", "not pooled", "-")
            continue
        for label, key in _POOLED_ROWS:
            iv = summary.get(key)
            if not isinstance(iv, dict):
                continue
            if key == "acceptance_rate" and summary.get("acceptance_rate_per") == "draft-tree node":
                label = "acceptance rate per tree node"
            gate = next((g for g in gates if g["name"] == key and g.get("concurrency") in (None, c)), None)
            table.add_row(
                f"{label}{at}",
                _num(iv["estimate"]),
                f"[{_num(iv['low'])}, {_num(iv['high'])}] {iv.get('kind', '')}",
                f"{gate['op']} {gate['threshold']}" if gate else "-",
            )
        table.add_row(f"[dim]total tok/s, summed{at}[/]", _num(summary.get("wall_tokens_per_s")), "-", "-")
    notes = [Text(f"  {note}") for note in pooled["notes"]]
    return Group(table, *notes)
