"""The release record: one file per release and host (`record.json`), the host's own word on where
the release is in its life and what its verification says, as Helm keeps a record per revision.

    life:          staged -> pending -> serving -> superseded
                                 \\-> failed-start   \\-> rolled-back
    verification:  none | verified | failed | skipped   (and whether it is a tune candidate)

The two fields change apart: a rollback restarts a release that keeps its verification, and a
verify changes the verification of a release that keeps serving. Every write replaces the file
whole (a reader sees the old record or the new one); the writer holds the profile's lock, so a
read-modify-write is never interleaved. The ledger on the operator's machine is the history of
what was done; these records are the truth about the host, and `status`, `deploy`, `rollback` and
`tune` read them. Releases written before records existed are read from their verdict file and
the `current` link (`from_legacy`).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, replace
from datetime import UTC, datetime
from typing import Any, Literal, cast, get_args

from specctl.hosts.transport import Transport
from specctl.release import whole

RECORD_FILE = "record.json"
LEGACY_VERDICT_FILE = "verdict.json"  # what releases before the record kept of their last verify

Life = Literal["staged", "pending", "serving", "superseded", "rolled-back", "failed-start"]
Verified = Literal["none", "verified", "failed", "skipped"]
LIVES: tuple[str, ...] = get_args(Life)
VERIFICATIONS: tuple[str, ...] = get_args(Verified)


def now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


@dataclass(frozen=True)
class Verification:
    """What the newest verify (by run `run`, at `at`) said of the release; `gates` are its measured
    intervals (name, threshold, estimate, low, high), so a reader sees how close it was."""

    state: Verified = "none"
    run: str | None = None
    at: str | None = None
    gates: tuple[dict[str, Any], ...] = ()
    tune_candidate: bool = False
    accept_length: dict[str, Any] | None = (
        None  # the headline interval (estimate, low, high, n): what `watch` holds it to
    )

    @property
    def text(self) -> str:
        """One phrase for `status`: verified (with its headline interval), FAILED verify, UNVERIFIED."""
        at = f" at {self.at}" if self.at else ""
        if self.tune_candidate:
            return "a tune candidate, never verified"
        if self.state == "verified":
            return "verified" + at + _headline(self.gates)
        if self.state == "failed":
            return "FAILED verify" + at + _headline(self.gates)
        if self.state == "skipped":
            return "UNVERIFIED (verify skipped)"
        return "UNVERIFIED"


def _headline(gates: tuple[dict[str, Any], ...]) -> str:
    first = next((g for g in gates if g.get("low") is not None), None)
    if first is None:
        return ""
    return f" ({first['name']} {first['estimate']:.2f}, interval [{first['low']:.2f}, {first['high']:.2f}])"


@dataclass(frozen=True)
class ReleaseRecord:
    """One release on one host: its life since `since`, and its verification."""

    run_id: str
    version: int | None = None  # the profile's version the release was made from
    life: Life = "staged"
    since: str = field(default_factory=now)
    verification: Verification = field(default_factory=Verification)

    @property
    def verified(self) -> bool:
        return self.verification.state == "verified" and not self.verification.tune_candidate

    def moved(self, life: Life) -> ReleaseRecord:
        return self if life == self.life else replace(self, life=life, since=now())

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["verification"]["gates"] = list(self.verification.gates)
        return data

    def to_json(self) -> bytes:
        """The file's content; the run id is the directory's name, not repeated inside."""
        data = self.to_dict()
        del data["run_id"]
        return (json.dumps(data, sort_keys=True) + "\n").encode()

    @classmethod
    def parse(cls, run_id: str, raw: bytes | str | None) -> ReleaseRecord | None:
        """The record a file holds, or None when it holds none (absent, torn by hand, or foreign)."""
        data = _json(raw)
        life, v = data.get("life"), data.get("verification")
        if life not in LIVES or not isinstance(v, dict) or v.get("state") not in VERIFICATIONS:
            return None
        gates = tuple(g for g in v.get("gates") or () if isinstance(g, dict))
        version = data.get("version")
        return cls(
            run_id,
            version if isinstance(version, int) else None,
            cast(Life, life),
            str(data.get("since") or ""),
            Verification(
                cast(Verified, v["state"]),
                v.get("run"),
                v.get("at"),
                gates,
                bool(v.get("tune_candidate")),
                v["accept_length"] if isinstance(v.get("accept_length"), dict) else None,
            ),
        )

    @classmethod
    def from_legacy(
        cls, run_id: str, verdict: bytes | str | None, *, current: bool, summary: bytes | str | None = None
    ) -> ReleaseRecord:
        """A release from before records: its verdict file says how it was verified, `current`
        whether it serves, its summary (release.json) its version; what else it went through was
        never written down."""
        data = _json(verdict)
        version = _json(summary).get("version")
        passed = data.get("passed")
        state: Verified = "none" if not isinstance(passed, bool) else "verified" if passed else "failed"
        candidate = bool(data.get("tune_candidate"))
        return cls(
            run_id,
            version if isinstance(version, int) else None,
            "serving" if current else "superseded",
            "",
            Verification("none" if candidate else state, data.get("run"), data.get("at"), (), candidate),
        )


def first_record(version: int | None) -> str:
    """What a new release directory is written with: staged, never verified."""
    return ReleaseRecord("", version).to_json().decode()


def _json(raw: bytes | str | None) -> dict[str, Any]:
    try:
        value = json.loads(raw) if raw else {}
    except ValueError:
        return {}
    return value if isinstance(value, dict) else {}


def gate_intervals(gates: list[dict[str, Any]]) -> tuple[dict[str, Any], ...]:
    """What a record keeps of a verdict's gates (their `to_dict` form): each gate's measured interval."""
    kept = []
    for g in gates:
        interval = g.get("interval") or {}
        kept.append(
            {
                "name": g.get("name"),
                "op": g.get("op"),
                "threshold": g.get("threshold"),
                "passed": g.get("passed"),
                **{k: interval.get(k) for k in ("estimate", "low", "high", "n")},
            }
        )
    return tuple(kept)


# The run id `current` names on the first line, then every release's id, record, legacy verdict and
# summary (tab-separated; empty when absent). $1 = the profile's directory.
_READ_ALL = r"""
c=$(readlink "$1/current" 2>/dev/null); printf '%s\n' "${c##*/}"
for d in "$1"/releases/*/; do
  [ -d "$d" ] || continue
  case $d in *.part.*/) continue;; esac
  id=${d%/}; id=${id##*/}
  printf '%s\t%s\t%s\t%s\n' "$id" "$(tr -d '\n\t' < "$d/record.json" 2>/dev/null)" \
    "$(tr -d '\n\t' < "$d/verdict.json" 2>/dev/null)" "$(tr -d '\n\t' < "$d/release.json" 2>/dev/null)"
done
"""


def read_all(transport: Transport, base: str) -> tuple[str | None, list[ReleaseRecord]]:
    """What `current` names, and every release's record on the host, oldest first (run ids sort by time)."""
    lines = transport.run(["sh", "-c", _READ_ALL, "sh", base], retry=True).stdout.splitlines()
    current = (lines[0].strip() if lines else "") or None
    records = []
    for line in lines[1:]:
        run_id, record, verdict, summary = (line.split("\t") + ["", "", ""])[:4]
        records.append(
            ReleaseRecord.parse(run_id, record)
            or ReleaseRecord.from_legacy(run_id, verdict, current=run_id == current, summary=summary)
        )
    return current, sorted(records, key=lambda r: r.run_id)


_READ_ONE = 'for f in record.json verdict.json release.json; do tr -d "\\n\\t" <"$1/$f" 2>/dev/null; printf "\\t"; done'


def read(transport: Transport, release_dir: str, run_id: str, *, current: bool) -> ReleaseRecord:
    """One release's record (or what its legacy files say), in one round trip."""
    done = transport.run(["sh", "-c", _READ_ONE, "sh", release_dir], check=False, retry=True)
    record, verdict, summary = (done.stdout.split("\t") + ["", "", ""])[:3]
    return ReleaseRecord.parse(run_id, record) or ReleaseRecord.from_legacy(
        run_id, verdict, current=current, summary=summary
    )


def write(transport: Transport, release_dir: str, record: ReleaseRecord) -> None:
    """Replace the release's record whole (synced, then renamed into place: a full disk leaves the
    old record, and says so)."""
    whole.put(transport, f"{release_dir}/{RECORD_FILE}", record.to_json())


def update(
    transport: Transport,
    release_dir: str,
    run_id: str,
    *,
    life: Life | None = None,
    verification: Verification | None = None,
) -> ReleaseRecord:
    """Move the release to `life` and/or give it `verification`, keeping the rest of its record."""
    old = read(transport, release_dir, run_id, current=life == "serving")
    new = old.moved(life) if life is not None else old
    if verification is not None:
        new = replace(new, verification=verification)
    if new != old or old.since == "":
        write(transport, release_dir, new)
    return new
