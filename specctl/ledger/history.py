"""Reading runs as history: the headline numbers of a run, what differs between two runs, and
each profile's measured values over time. Plain data in and out; `runs`, `show` and `diff` print it."""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, NamedTuple

from specctl.errors import InputError
from specctl.ledger.ledger import Ledger
from specctl.ledger.records import HostRecord, Run
from specctl.verdict.measure import Measurement
from specctl.verdict.points import baseline_from_dict, point_level
from specctl.verdict.pooled import pool
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


class _Point(NamedTuple):
    """One operating point a host measured, as its verdict recorded it (summary in today's words)."""

    concurrency: int | None  # None: a verdict from before operating points
    summary: dict[str, Any]
    stopped_early: bool


def metrics(run: Run, baselines: Mapping[str, Run] | None = None) -> dict[str, Any]:
    """The headline numbers of a run, as `runs --json` prints them.

    Each HEADLINE key is the estimate at the first operating point (and where several were measured,
    each PER_POINT key's at every point as `key@concurrency`): pooled over the hosts where several
    measured (`pool_run`; None where it cannot be pooled honestly), the one host's where one did.
    `intervals` holds the same keys' intervals (estimate, low, high, n, kind; None where there is
    none); `pooled` the hosts pooled and what was not (None: fewer than two hosts measured);
    `per_host` every host's own estimates, intervals and verdict. `baselines` (run id -> run, as
    `baselines_of` reads them) lets the speedup be pooled."""
    hosts = [(record, _points(record)) for record in run.host_records]
    measured = [points for _, points in hosts if points]
    pooled = pool_run(run, baselines) if len(measured) > 1 else None
    if pooled is not None:
        intervals = _figures([(p["concurrency"], p["summary"]) for p in pooled["points"]])
    else:
        intervals = _figures([(p.concurrency, p.summary) for p in measured[0]] if measured else [])
    return {
        **_estimates(intervals),
        "intervals": intervals,
        "pooled": None if pooled is None else {"hosts": pooled["hosts"], "notes": pooled["notes"]},
        "per_host": [_host_figures(record, points) for record, points in hosts],
    }


def _host_figures(record: HostRecord, points: list[_Point]) -> dict[str, Any]:
    intervals = _figures([(p.concurrency, p.summary) for p in points])
    return {"host": record.host, "passed": record.passed, **_estimates(intervals), "intervals": intervals}


def _points(record: HostRecord) -> list[_Point]:
    """The operating points a host measured ([] when it measured nothing)."""
    verdict = record.verdict or {}
    summary = current({k: v for k, v in (verdict.get("summary") or {}).items() if k != "route"})
    if not summary:
        return []
    points = verdict.get("points") or []
    if not points:
        return [_Point(None, summary, bool(verdict.get("stopped_early")))]
    return [_Point(p.get("concurrency"), current(p.get("summary") or {}), bool(p.get("stopped_early"))) for p in points]


def _figures(points: Sequence[tuple[int | None, dict[str, Any] | None]]) -> dict[str, dict[str, Any] | None]:
    """HEADLINE at the first point; PER_POINT at each point as `key@concurrency` where there are several."""
    first = (points[0][1] if points else None) or {}
    out = {key: _interval(first.get(key)) for key in HEADLINE}
    if len(points) > 1:
        for c, summary in points:
            out |= {f"{key}@{c}": _interval((summary or {}).get(key)) for key in PER_POINT}
    return out


def _interval(value: Any) -> dict[str, Any] | None:
    return value if isinstance(value, dict) and isinstance(value.get("estimate"), (int, float)) else None


def _estimates(intervals: Mapping[str, dict[str, Any] | None]) -> dict[str, float | None]:
    return {key: None if iv is None else iv["estimate"] for key, iv in intervals.items()}


def pool_run(run: Run, baselines: Mapping[str, Run] | None = None) -> dict[str, Any] | None:
    """Each operating point of the run pooled over the hosts that measured (verdict/pooled.py says
    how), or None when fewer than two hosts measured anything.

    Nothing is filled in: a point is pooled only when every host that measured holds that point's
    requests in the ledger (a row recorded with its summary alone leaves the point's summary None),
    and the speedup only when every such host's baseline run is in `baselines` with its requests at
    that point (else it stays per host). `notes` says what was not pooled and why.
    Returns {"hosts": [...], "points": [{"concurrency", "summary"}], "notes": [...]}."""
    measured = [(record, points) for record in run.host_records if (points := _points(record))]
    if len(measured) < 2:
        return None
    first = measured[0][1]
    level = point_level(len(first))
    hosts = [record.host for record, _ in measured]
    if run.kind == "tune":  # each host picks its own winner: their requests measured different settings
        notes = ["not pooled: each host of a tune measures its own candidates"]
        return {
            "hosts": hosts,
            "points": [{"concurrency": p.concurrency, "summary": None} for p in first],
            "notes": notes,
        }
    missing = [r.host for r, _ in measured if not r.measurements or not {"points", "requests"} & set(r.measurements)]
    requests = {
        r.host: baseline_from_dict(r.measurements) for r, _ in measured if r.measurements and r.host not in missing
    }
    notes = [f"not pooled: the ledger holds the summary of {', '.join(missing)}, not its requests"] if missing else []
    out: list[dict[str, Any]] = []
    speedup_unpooled = False
    for i, c in enumerate(p.concurrency for p in first):
        at = [points[i] if i < len(points) else None for _, points in measured]
        found = [_at(requests.get(r.host), c) for r, _ in measured]
        if missing or any(m is None for m in found):
            absent = [r.host for (r, _), m in zip(measured, found, strict=True) if m is None]
            if not missing:
                notes.append(f"not pooled{_where(c, len(first))}: no requests of {', '.join(absent)} there")
            out.append({"concurrency": c, "summary": None})
            continue
        with_speedup = any(p is not None and p.summary.get("speedup") for p in at)
        bases = _baselines_at([r for r, _ in measured], baselines or {}, c) if with_speedup else None
        speedup_unpooled |= with_speedup and bases is None
        summary = pool(
            [m for m in found if m is not None],
            bases,
            sequential=any(p is None or p.stopped_early for p in at),
            level=level,
        )
        per = next((p.summary["acceptance_rate_per"] for p in at if p and p.summary.get("acceptance_rate_per")), None)
        summary["acceptance_rate_per"] = per or summary["acceptance_rate_per"]  # the hosts know eagle_topk
        out.append({"concurrency": c, "summary": summary if c is None else {"concurrency": c, **summary}})
    if speedup_unpooled:
        notes.append("speedup: per host only (not every host's baseline, with its requests, is in the ledger)")
    if not missing:
        notes.append("total tok/s: the sum of the hosts' own (they serve side by side)")
    return {"hosts": hosts, "points": out, "notes": notes}


def _at(points: Mapping[int, Measurement] | None, c: int | None) -> Measurement | None:
    """The requests measured at concurrency c (None: a verdict from before operating points, whose
    requests are its one point)."""
    if not points:
        return None
    if c is None:
        return next(iter(points.values())) if len(points) == 1 else None
    return points.get(c)


def _where(c: int | None, points: int) -> str:
    return f" @{c}" if c is not None and points > 1 else ""


def _baselines_at(hosts: Sequence[HostRecord], baselines: Mapping[str, Run], c: int | None) -> list[Measurement] | None:
    """The distinct baselines the hosts were compared with, at concurrency c; None when any is not at hand."""
    chosen: dict[str, Measurement] = {}
    for record in hosts:
        run_id = (record.verdict or {}).get("baseline_run")
        base = baselines.get(run_id) if isinstance(run_id, str) else None
        # the record verify read (flows/baseline.py find_baseline): the baseline run's first with requests
        source = next((h.measurements for h in base.host_records if h.measurements), None) if base else None
        m = _at(baseline_from_dict(source), c) if source else None
        if m is None:
            return None
        chosen[str(run_id)] = m
    return list(chosen.values())


def baselines_of(book: Ledger, runs: Iterable[Run]) -> dict[str, Run]:
    """The baseline runs the hosts of several-host runs were compared with, by id: those the ledger
    still holds (`metrics` and `pool_run` pool the speedup with them)."""
    wanted = {
        run_id
        for run in runs
        if sum(bool(_points(r)) for r in run.host_records) > 1
        for r in run.host_records
        if isinstance(run_id := (r.verdict or {}).get("baseline_run"), str)
    }
    found = {}
    for run_id in sorted(wanted):
        try:
            found[run_id] = book.get(run_id)
        except InputError:  # pruned, or recorded in another ledger: the speedup stays per host
            continue
    return found


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


def run_diff(a: Run, b: Run, baselines: Mapping[str, Run] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Profile fields, rendered commands, host facts and measurements where the two runs differ
    (measurements: every one, pooled, then per host for the hosts both runs have; `_measured`)."""

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
        "measurements": _measured(metrics(a, baselines), metrics(b, baselines)),
    }


def _measured(a: Mapping[str, Any], b: Mapping[str, Any]) -> list[dict[str, Any]]:
    """Every measured value side by side with its interval (`a_interval`, `b_interval`): the
    headline first, then the operating points either run has. Where either run pooled several
    hosts, first each host both runs have (`host` naming it), then the runs' figures (`host` None:
    pooled where several hosts measured, the one host's where one did)."""
    figures = set(a["intervals"]) | set(b["intervals"])
    keys = [*HEADLINE, *sorted(figures - set(HEADLINE), key=lambda k: (int(k.rsplit("@", 1)[1]), k))]

    def side_by_side(host: str | None, left: Mapping[str, Any], right: Mapping[str, Any]) -> list[dict[str, Any]]:
        return [
            {
                "field": k,
                "host": host,
                "a": left["intervals"].get(k) and left["intervals"][k]["estimate"],
                "b": right["intervals"].get(k) and right["intervals"][k]["estimate"],
                "a_interval": left["intervals"].get(k),
                "b_interval": right["intervals"].get(k),
            }
            for k in keys
        ]

    out = []
    if a["pooled"] is not None or b["pooled"] is not None:
        theirs = {h["host"]: h for h in b["per_host"]}
        for mine in a["per_host"]:
            if mine["host"] in theirs:
                out += side_by_side(mine["host"], mine, theirs[mine["host"]])
    return out + side_by_side(None, a, b)


def _argv_changes(a: list[str], b: list[str]) -> list[str]:
    return [line for line in difflib.ndiff(a, b) if line[:1] in "+-"]


def thresholds(run: Run) -> dict[str, float]:
    """The gates the run's hosts were held to, keyed as `metrics` keys the figures they judge: the
    gate's name at the first operating point, and `name@concurrency` at each where there were several."""
    for record in run.host_records:
        verdict = record.verdict or {}
        gates = verdict.get("gates") or []
        if not gates:
            continue
        points = verdict.get("points") or []
        first = points[0].get("concurrency") if points else None
        out: dict[str, float] = {}
        for g in gates:
            c = g.get("concurrency")
            if c is None or c == first:
                out[g["name"]] = float(g["threshold"])
            if c is not None:
                out[f"{g['name']}@{c}"] = float(g["threshold"])
        return out
    return {}


def trend(found: list[Run], baselines: Mapping[str, Run] | None = None) -> dict[str, list[dict[str, Any]]]:
    """Per profile, the runs that measured something: time, run, version and the `metrics` of each
    (pooled over its hosts, with `intervals` and `per_host`), with the `gates` it was held to."""
    series: dict[str, list[dict[str, Any]]] = {}
    for r in found:
        m = metrics(r, baselines)
        if (
            r.profile
            and r.kind != "baseline"
            and (m["accept_length"] is not None or m["output_tokens_per_s"] is not None)
        ):
            series.setdefault(r.profile, []).append(
                {"run": r.id, "at": r.started_at, "version": r.profile_version, **m, "gates": thresholds(r)}
            )
    return series
