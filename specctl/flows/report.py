"""What a recorded flow reports per host, and the profile fields every run records."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from specctl.flows.static import CheckReport


@dataclass
class HostReport:
    """One host's account of a recorded flow."""

    host: str
    ok: bool
    release: str | None
    detail: str
    verdict: dict[str, Any] | None = None
    rolled_back_to: str | None = None
    rollback_verdict: dict[str, Any] | None = None
    log_tail: tuple[str, ...] = ()
    rolled_back: bool = False  # taken back by the failure policy (too many hosts failed to start)
    fix: str | None = None  # what to do about a failure, when the error says
    seconds: float | None = None  # how long the host's part of the flow took, start to end
    time_limit: str | None = None  # the server's time limit and when serving stops (a scheduler's job), in words

    def timed(self, seconds: float | None) -> HostReport:
        self.seconds = round(seconds, 2) if seconds is not None else None
        return self

    @property
    def passed(self) -> bool:
        return self.ok and bool(self.verdict and self.verdict.get("passed"))


def profile_fields(report: CheckReport) -> dict[str, Any]:
    p = report.inputs.profile
    return {
        "profile": p.model_dump(mode="json", by_alias=True),
        "profile_sha256": report.inputs.profile_sha256,
        "engine": p.engine.name,
        "engine_version": p.engine.version,
    }
