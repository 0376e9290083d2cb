"""Findings: the result of a static check, as plain data (code, severity, values compared, fix)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Severity(str, Enum):  # noqa: UP042 - str() of a member stays "Severity.ERROR" as before
    ERROR = "error"
    WARNING = "warning"
    INFO = "info"


@dataclass(frozen=True)
class Finding:
    """One check result. `code` is stable across releases; `values` holds what was compared."""

    code: str
    severity: Severity
    message: str
    fix: str
    values: dict[str, Any] = field(default_factory=dict)
    field: str | None = None  # the profile or manifest field it is about

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["severity"] = self.severity.value
        return data


def has_errors(findings: list[Finding]) -> bool:
    return any(f.severity is Severity.ERROR for f in findings)
