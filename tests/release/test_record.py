"""The release record: its two fields, its file, and how `status` words it."""

from __future__ import annotations

from pathlib import Path

from specctl.hosts.local import local_transport
from specctl.release import record
from specctl.release.record import ReleaseRecord, Verification, first_record, gate_intervals

GATES = [
    {
        "name": "accept_length",
        "op": ">=",
        "threshold": 3.0,
        "passed": True,
        "decided": True,
        "note": "",
        "interval": {"estimate": 3.41, "low": 3.12, "high": 3.7, "n": 40, "kind": "fixed"},
    },
    {"name": "speedup", "op": ">=", "threshold": 1.1, "passed": True, "decided": True, "note": "", "interval": None},
]


def test_a_record_round_trips_through_its_file_and_life_moves_apart_from_verification(tmp_path: Path) -> None:
    t = local_transport()
    d = tmp_path / "r1"
    d.mkdir()
    (d / record.RECORD_FILE).write_text(first_record(7))
    start = record.read(t, str(d), "r1", current=False)
    assert (start.version, start.life, start.verification.state) == (7, "staged", "none")

    verified = Verification("verified", "run-9", "2026-12-03T10:00:00Z", gate_intervals(GATES))
    record.update(t, str(d), "r1", life="serving", verification=verified)
    after = record.read(t, str(d), "r1", current=False)
    assert (after.life, after.verification) == ("serving", verified)
    record.update(t, str(d), "r1", life="superseded")
    moved = record.read(t, str(d), "r1", current=False)
    assert moved.life == "superseded" and moved.verification == verified and moved.verified


def test_status_words_each_verification() -> None:
    verified = Verification("verified", "r", "T", gate_intervals(GATES))
    assert verified.text == "verified at T (accept_length 3.41, interval [3.12, 3.70])"
    assert Verification("failed", "r", "T").text == "FAILED verify at T"
    assert Verification("skipped").text == "UNVERIFIED (verify skipped)"
    assert Verification().text == "UNVERIFIED"
    assert Verification("none", tune_candidate=True).text == "a tune candidate, never verified"


def test_a_file_that_holds_no_record_is_read_as_none() -> None:
    for raw in (None, b"", b"{", b"[]", b'{"life": "dancing", "verification": {"state": "none"}}'):
        assert ReleaseRecord.parse("r", raw) is None
