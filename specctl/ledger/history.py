"""Reading runs as history: the headline numbers of a run, what differs between two runs, and
each profile's measured values over time. Plain data in and out; `runs`, `show` and `diff` print it."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable
from typing import Any

from specctl.errors import InputError
from specctl.ledger.ledger import Ledger
from specctl.ledger.records import Run
from specctl.verdict.summary import current

SHORT_ID = re.compile(r"[0-9a-f]{6}")  # the random suffix of a run id (20261130T210811Z-53f951)


def short_ids(ids: Iterable[str]) -> dict[str, str]:
    """The short form `runs` shows for each id: its random suffix, which `find_run` takes back;
    the whole id where two of them share a suffix (or it has none)."""
    suffix = {i: i.rsplit("-", 1)[-1] for i in ids}
    counts = Counter(suffix.values())
    return {i: s if "-" in i and counts[s] == 1 and SHORT_ID.fullmatch(s) else i for i, s in suffix.items()}


def find_run(book: Ledger, ref: str) -> Run:
    """A run by id, unique id prefix, or the short id `runs` shows (its last six hex digits)."""
    if SHORT_ID.fullmatch(ref):
        rows = book.db.execute("SELECT id FROM runs WHERE id LIKE ? OR id LIKE ?", (f"%-{ref}", f"{ref}%")).fetchall()
        matches = sorted({str(row[0]) for row in rows})
        if len(matches) > 1:
            raise InputError(
                f"{ref!r} matches {len(matches)} runs: {', '.join(matches[:5])}",
                fix="give more of the run id (`specctl runs -o wide` shows whole ids)",
            )
        if matches:
            return book.get(matches[0])
    return book.get(ref)


HEADLINE = ("accept_length", "acceptance_rate", "output_tokens_per_s", "decode_tokens_per_s", "speedup", "ttft_s")
PER_POINT = ("accept_length", "output_tokens_per_s", "speedup", "ttft_s")


def metrics(run: Run) -> dict[str, float | None]:
    """The headline numbers of a run, from its first host that measured something: its first
    operating point's, and when it measured several, each point's as `key@concurrency`."""
    out: dict[str, float | None] = dict.fromkeys(HEADLINE)
    for record in run.host_records:
        verdict = record.verdict or {}
        summary = current(verdict.get("summary") or {})
        if not summary:
            continue
        out |= {key: _estimate(summary.get(key)) for key in HEADLINE}
        points = verdict.get("points") or []
        if len(points) > 1:
            for point in points:
                point_summary = current(point.get("summary") or {})
                out |= {f"{key}@{point['concurrency']}": _estimate(point_summary.get(key)) for key in PER_POINT}
        break
    return out


def _estimate(value: Any) -> float | None:
    return value.get("estimate") if isinstance(value, dict) else None


def brief(run: Run) -> dict[str, Any]:
    """A run's identity and outcome, as `runs` lists it (with `metrics` beside it)."""
    return {
        "id": run.id,
        "kind": run.kind,
        "profile": run.profile,
        "version": run.profile_version,
        "hosts": run.hosts,
        "status": run.status,
        "passed": run.passed,
        "parent": run.parent,
        "started_at": run.started_at,
        "finished_at": run.finished_at,
    }


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
        return [
            {"field": k, "a": left.get(k), "b": right.get(k)}
            for k in sorted(set(left) | set(right))
            if left.get(k) != right.get(k)
        ]

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
        "facts": [
            r
            for r in rows(flatten(first(a, "facts") or {}), flatten(first(b, "facts") or {}))
            if r["field"] not in skip
        ],
        "measurements": _measured(metrics(a), metrics(b)),
    }


def _measured(a: dict[str, float | None], b: dict[str, float | None]) -> list[dict[str, Any]]:
    """Every measured value side by side: the headline first, then the operating points either run has."""
    keys = [*HEADLINE, *sorted((set(a) | set(b)) - set(HEADLINE), key=lambda k: (int(k.rsplit("@", 1)[1]), k))]
    return [{"field": k, "a": a.get(k), "b": b.get(k)} for k in keys]


def _argv_changes(a: list[str], b: list[str]) -> list[str]:
    return [line for line in difflib.ndiff(a, b) if line[:1] in "+-"]


def trend(found: list[Run]) -> dict[str, list[dict[str, Any]]]:
    """Per profile, the runs that measured something: time, run, version, accept length, throughput."""
    series: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        m = metrics(r)
        if (
            r.profile
            and r.kind != "baseline"
            and (m["accept_length"] is not None or m["output_tokens_per_s"] is not None)
        ):
            series.setdefault(r.profile, []).append(
                {"run": r.id, "at": r.started_at, "version": r.profile_version, **m}
            )
    return series
