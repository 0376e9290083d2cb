"""What the ledger holds, as data: a Run with its HostRecords and StepEvents, and the Outcome a
recorded block sets before it ends."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


@dataclass
class Outcome:
    """What a recorded block sets before it ends normally."""

    status: str = "succeeded"
    verdict: dict[str, Any] | None = None


@dataclass(frozen=True)
class HostRecord:
    host: str
    release: str | None
    facts: dict[str, Any] | None
    commands: list[list[str]] | None
    measurements: dict[str, Any] | None
    verdict: dict[str, Any] | None
    passed: bool | None


@dataclass(frozen=True)
class StepEvent:
    """One step boundary of a run on one host: `event` is one of EVENTS, `detail` free text or JSON."""

    host: str
    step: str
    event: str
    at: str
    detail: str | None


@dataclass(frozen=True)
class Run:
    """One row of `runs` with its hosts, as data."""

    id: str
    kind: str
    profile: str | None
    profile_version: int | None
    profile_sha256: str | None
    hosts: list[str]
    command: str
    user: str
    machine: str
    pid: int
    reason: str | None
    engine: str | None
    engine_version: str | None
    inputs: dict[str, Any]
    verdict: dict[str, Any] | None
    status: str
    started_at: str
    finished_at: str | None
    parent: str | None
    baseline_key: str | None
    host_records: tuple[HostRecord, ...] = ()
    # None when not read: `get` reads them; listings skip them (two per step and host: 50 deploys
    # of 100 hosts are 80,000 rows, about 60 times the cost of the listing itself)
    events: tuple[StepEvent, ...] | None = None

    @property
    def passed(self) -> bool | None:
        """The verdict, or None when the run judged nothing (a deploy with --no-verify, an unlock)."""
        value = (self.verdict or {}).get("passed")
        return None if value is None else bool(value)

    def to_dict(self) -> dict[str, Any]:
        data = {k: v for k, v in self.__dict__.items() if k not in ("host_records", "events")}
        data["host_records"] = [h.__dict__ for h in self.host_records]
        if self.events is not None:
            data["events"] = [e.__dict__ for e in self.events]
        return data


@dataclass(frozen=True)
class WatchWindow:
    """One window `watch` judged on one host's serving release (times are UTC ISO strings)."""

    run_id: str
    host: str
    release: str
    profile: str | None
    started_at: str
    ended_at: str
    state: str  # ok | degraded | unknown | unreadable | down
    look: int  # the how-many-th judged look at the release (0: not judged)
    estimate: float | None = None  # the rest: None for a window nothing could be judged on
    low: float | None = None
    high: float | None = None
    floor: float | None = None
    method: str | None = None
    requests: int | None = None
    action: str | None = None  # what watch did about it (None: nothing)
    detail: dict[str, Any] | None = None
