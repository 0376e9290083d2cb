"""Reading runs as history: the headline numbers of a run, what differs between two runs, and
each profile's measured values over time. Plain data in and out; `runs`, `show` and `diff` print it."""

from __future__ import annotations

import difflib
from typing import Any

from specctl.ledger.ledger import Run


def metrics(run: Run) -> dict[str, float | None]:
    """The headline numbers of a run: from its first host that measured something."""
    out: dict[str, float | None] = {"accept_length": None, "acceptance_rate": None, "decode_tokens_per_s": None,
                                    "speedup": None, "ttft_s": None}
    for record in run.host_records:
        summary = (record.verdict or {}).get("summary") or {}
        if summary:
            for key in out:
                value = summary.get(key)
                out[key] = value.get("estimate") if isinstance(value, dict) else None
            break
    return out


def flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    """Nested mappings as dotted keys (lists stay whole: a list of ids is one value)."""
    if isinstance(value, dict):
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
        return out
    return {prefix: value}


def run_diff(a: Run, b: Run) -> dict[str, list[dict[str, Any]]]:
    """Profile fields, rendered commands, host facts and measurements where the two runs differ."""
    def rows(left: dict[str, Any], right: dict[str, Any]) -> list[dict[str, Any]]:
        return [{"field": k, "a": left.get(k), "b": right.get(k)} for k in sorted(set(left) | set(right)) if left.get(k) != right.get(k)]

    def first(run: Run, attr: str) -> Any:
        return next((getattr(h, attr) for h in run.host_records if getattr(h, attr)), None)

    commands = []
    for i, (ca, cb) in enumerate(zip(first(a, "commands") or [], first(b, "commands") or [], strict=False)):
        if ca != cb:
            commands.append({"node": i, "a": ca, "b": cb, "changed": _argv_changes(ca, cb)})
    skip = ("host", "disk_free_gib", "port_free")
    return {
        "profile": rows(flatten(a.inputs.get("profile") or {}), flatten(b.inputs.get("profile") or {})),
        "capture": rows(flatten(a.inputs.get("capture") or {}), flatten(b.inputs.get("capture") or {})),
        "commands": commands,
        "facts": [r for r in rows(flatten(first(a, "facts") or {}), flatten(first(b, "facts") or {})) if r["field"] not in skip],
        "measurements": [{"field": k, "a": metrics(a)[k], "b": metrics(b)[k]} for k in metrics(a)],
    }


def _argv_changes(a: list[str], b: list[str]) -> list[str]:
    return [line for line in difflib.ndiff(a, b) if line[:1] in "+-"]


def trend(found: list[Run]) -> dict[str, list[dict[str, Any]]]:
    """Per profile, the runs that measured something: time, run, version, accept length, throughput."""
    series: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        m = metrics(r)
        if r.profile and r.kind != "baseline" and (m["accept_length"] is not None or m["decode_tokens_per_s"] is not None):
            series.setdefault(r.profile, []).append({"run": r.id, "at": r.started_at, "version": r.profile_version,
                                                     "accept_length": m["accept_length"], "decode_tokens_per_s": m["decode_tokens_per_s"]})
    return series
