"""What a release directory holds of its inputs, written at materialise and read back once per
command: the resolved profile, the plan, the pinned workload and a one-line summary. A rollback
restarts and verifies a release from these files, never from today's working tree."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from specctl.errors import HostError, InputError
from specctl.profile.profile import Profile
from specctl.release.release import SUMMARY_FILE, WORKLOAD_FILE, Release
from specctl.verdict.workload import Workload, parse_workload

PROFILE_FILE = "profile.json"
PLAN_FILE = "plan.json"


@dataclass(frozen=True)
class ReleaseDocs:
    """A release's own record of what it serves."""

    profile: Profile
    plan: dict[str, Any]
    summary: dict[str, Any]
    workload: Workload

    @property
    def port(self) -> int:
        return self.profile.engine.port

    def commands(self) -> list[list[str]]:
        return [list(node["argv"]) for node in self.plan.get("nodes", ())]


def read_release(release: Release) -> ReleaseDocs:
    """Read and parse a release's documents; a damaged release is a host error naming the file."""
    t = release.transport
    names = (PROFILE_FILE, PLAN_FILE, SUMMARY_FILE, WORKLOAD_FILE)
    done = t.run(
        [
            "sh",
            "-c",
            'cd "$1" || exit 1; shift; for f; do printf "%s\\0" "$(wc -c <"$f" 2>/dev/null || echo -1)"; '
            'cat "$f" 2>/dev/null; done',
            "sh",
            release.dir,
            *names,
        ],
        check=False,
        retry=True,
    )
    raw = _split(done.out, len(names)) if done.rc == 0 else None
    if raw is None or any(data is None for data in raw):
        missing = names if raw is None else [n for n, data in zip(names, raw, strict=True) if data is None]
        raise HostError(
            f"{t.name}: release {release.run_id} lacks {', '.join(missing)}",
            host=t.name,
            fix="it predates verify or was damaged; deploy the profile again",
        )
    profile_raw, plan_raw, summary_raw, workload_raw = (data or b"" for data in raw)
    try:
        summary = json.loads(summary_raw)
        return ReleaseDocs(
            Profile.model_validate(json.loads(profile_raw)),
            json.loads(plan_raw),
            summary,
            parse_workload(str(summary.get("workload", "workload")), workload_raw),
        )
    except (ValueError, ValidationError, AttributeError, InputError) as exc:
        raise HostError(
            f"{t.name}: release {release.run_id} has a damaged document: {str(exc)[:200]}",
            host=t.name,
            fix="deploy the profile again; do not edit release directories by hand",
        ) from None


def _split(out: bytes, count: int) -> list[bytes | None] | None:
    """Undo the `size NUL content` framing of read_release's one round trip."""
    parts: list[bytes | None] = []
    rest = out
    for _ in range(count):
        size_text, sep, rest = rest.partition(b"\0")
        if not sep:
            return None
        size = int(size_text.strip() or b"-1")
        if size < 0:
            parts.append(None)
            continue
        parts.append(rest[:size])
        rest = rest[size:]
    return parts
