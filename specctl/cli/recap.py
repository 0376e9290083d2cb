"""The recap a long operation ends with (Ansible's play recap): one row per host with the release,
how it ended, the headline figures with their intervals, the verdict and the time, then a line for
each thing on a host that needs a person (a failed gate, an error, a restore). It reads the
HostReport data a deploy, verify or rollback prints under --json."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from specctl.cli._output import host_line
from specctl.cli.figures import interval_figure
from specctl.ledger.history import short_ids
from specctl.verdict.summary import current

# columns a narrow terminal loses first: the time, then the release id (`-o wide` shows all)
DROPPED_FIRST = ("time", "release")


def _state(r: Mapping[str, Any]) -> str:
    """How the host's part ended, in a word or two."""
    if r.get("rolled_back"):
        return "undone"
    if not r.get("ok"):
        return "failed"
    back = r.get("rolled_back_to")
    if back and back != r.get("release"):
        return "rolled back"
    return "serving"


def _verdict(v: Mapping[str, Any] | None) -> str:
    if not v or v.get("gates") is None:
        return "FAIL" if v and v.get("passed") is False else "skipped" if v is None else "-"
    return "pass" if v.get("passed") else "FAIL"


def _figures(v: Mapping[str, Any] | None) -> tuple[str, str]:
    summary = current(dict((v or {}).get("summary") or {}))
    return interval_figure(summary.get("accept_length")), interval_figure(summary.get("speedup"), suffix="x")


def _took(r: Mapping[str, Any]) -> str:
    s = r.get("seconds")
    return f"{s:.0f} s" if isinstance(s, int | float) else "-"


def recap_rows(reports: Sequence[Mapping[str, Any]], *, wide: bool) -> list[dict[str, str]]:
    """One row per host, and one more under a host whose deploy was rolled back: the release that
    serves again, with its own verdict."""
    ids = [i for r in reports for i in (r.get("release"), r.get("rolled_back_to")) if i]
    short = {i: i for i in ids} if wide else short_ids(ids)
    rows = []
    for r in reports:
        accept, speedup = _figures(r.get("verdict"))
        rows.append(
            {
                "host": str(r["host"]),
                "release": short.get(r.get("release") or "", "-"),
                "state": _state(r),
                "accept length": accept,
                "speedup": speedup,
                "verdict": _verdict(r.get("verdict")) if r.get("ok") else "-",
                "time": _took(r),
            }
        )
        back = r.get("rolled_back_to")
        if back and back != r.get("release"):
            accept, speedup = _figures(r.get("rollback_verdict"))
            rows.append(
                {
                    "host": "",
                    "release": short.get(back, back),
                    "state": "serving again",
                    "accept length": accept,
                    "speedup": speedup,
                    "verdict": _verdict(r.get("rollback_verdict")),
                    "time": "",
                }
            )
    return rows


def attention(reports: Sequence[Mapping[str, Any]]) -> list[str]:
    """What a person must read under the table: the server's time limit (a scheduler's job stops at
    it), each failed gate with its interval and threshold, drift and error findings, a failure with
    its fix, what a rollback brought back."""
    lines = []
    for r in reports:
        host = r["host"]
        if r.get("time_limit"):  # a scheduler ends the server at its time limit, however short: said first
            lines.append(f"{host}: {r['time_limit']}")
        if not r.get("ok") or r.get("rolled_back"):
            lines.append(host_line(host, r.get("detail")) + (f" (fix: {r['fix']})" if r.get("fix") else ""))
            continue
        verdict = r.get("verdict") or {}
        for g in verdict.get("gates") or []:
            if not g.get("passed"):
                at = f" @{g['concurrency']}" if g.get("concurrency") is not None else ""
                measured = interval_figure(g.get("interval")) if g.get("interval") else g.get("note", "not measured")
                lines.append(
                    f"{host}: {g['name']}{at} {measured}, needs {g['op']} {g['threshold']}: FAIL"
                    + ("" if g.get("decided", True) else " (undecided)")
                )
        for d in verdict.get("drift") or []:
            lines.append(f"{host}: drift {d['field']}: plan {d['expected']!r}, server {d['reported']!r}")
        for f in verdict.get("findings") or []:
            if f.get("severity") == "error":
                lines.append(f"{host}: {f['code']} {f['message']} (fix: {f['fix']})")
        back = r.get("rolled_back_to")
        if back and back != r.get("release"):
            lines.append(f"{host}: rolled back to {back}, the release that served before")
        elif verdict.get("passed") is False:  # not rolled back: the detail says why (or what the verify lacked)
            lines.append(host_line(host, r.get("detail")))
    return lines


def recap_view(reports: Sequence[Mapping[str, Any]], *, title: str, width: int, wide: bool) -> RenderableType:
    """The table (columns dropped, least needed first, until it fits `width`; none with `wide`),
    then the lines that need a person."""
    from rich import box
    from rich.table import Table

    rows = recap_rows(reports, wide=wide)
    names = list(rows[0]) if rows else ["host"]
    if not wide:
        for dropped in DROPPED_FIRST:
            widths = [max([len(n), *(len(row[n]) for row in rows)]) for n in names]
            if sum(widths) + 2 * (len(names) - 1) <= width:
                break
            names.remove(dropped)
    table = Table(box=box.SIMPLE_HEAD if wide else None, pad_edge=False, header_style="bold", show_edge=False)
    for name in names:
        table.add_column(name, justify="right" if name == "time" else "left", overflow="fold")
    for row in rows:
        style = "bold red" if row["verdict"] == "FAIL" or row["state"] in ("failed", "undone") else None
        table.add_row(*(row[n] for n in names), style=style)
    lines = [Text(line, overflow="fold") for line in attention(reports)]
    return Group(Text(title, style="bold"), table, *lines)
