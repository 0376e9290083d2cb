"""Which release a rollback goes back to, from the host's release records."""

from __future__ import annotations

from pathlib import Path

import pytest

from specctl.errors import InputError
from specctl.flows.rollback import choose_release, release_records
from specctl.hosts.local import local_transport
from specctl.release.record import ReleaseRecord, Verification


def _record(run_id: str, version: int, state: str, life: str = "superseded", **kw: bool) -> ReleaseRecord:
    return ReleaseRecord(run_id, version, life, "t", Verification(state, **kw))  # type: ignore[arg-type]


RECORDS = [
    _record("20261101T000000Z-a", 1, "verified"),
    _record("20261102T000000Z-b", 2, "verified"),
    _record("20261103T000000Z-c", 3, "failed", "rolled-back"),
    _record("20261104T000000Z-d", 3, "skipped", "serving"),
    _record("20261105T000000Z-e", 3, "none", tune_candidate=True),
]


def test_default_is_the_newest_verified_release_that_is_not_serving() -> None:
    assert choose_release(RECORDS, "20261104T000000Z-d").run_id == "20261102T000000Z-b"
    assert choose_release(RECORDS, "20261102T000000Z-b").run_id == "20261101T000000Z-a"


def test_a_release_is_skipped_only_when_its_server_is_seen_running() -> None:
    """`current` whose job was cancelled (or whose server crashed) is the release to go back to when it
    is the only verified one; a release seen running is skipped, `current` or not."""
    only = [_record("x", 1, "failed", "superseded"), _record("c", 2, "verified", "serving")]
    assert choose_release(only, "c", running=set()).run_id == "c"
    with pytest.raises(InputError, match="no verified release"):
        choose_release(only, "c", running={"c"})
    assert choose_release(RECORDS, None, running={"20261102T000000Z-b"}).run_id == "20261101T000000Z-a"


def test_by_run_prefix_and_by_version() -> None:
    assert choose_release(RECORDS, None, to_run="20261103").run_id == "20261103T000000Z-c"  # by name: whatever it says
    assert choose_release(RECORDS, None, to_run="20261105").run_id == "20261105T000000Z-e"  # a candidate, by name
    assert choose_release(RECORDS, None, to_version=1).run_id == "20261101T000000Z-a"
    # version 3: never verified beats failed, and a tune candidate is never chosen by version
    assert choose_release(RECORDS, None, to_version=3).run_id == "20261104T000000Z-d"


def test_a_failed_start_is_no_target_by_version() -> None:
    records = [_record("a", 1, "verified"), _record("b", 1, "none", "failed-start")]
    assert choose_release(records, None, to_version=1).run_id == "a"


def test_nothing_to_go_back_to_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="no verified release"):
        choose_release([_record("x", 1, "failed")], "y")
    with pytest.raises(InputError, match="no verified release"):  # the serving one is no target
        choose_release([_record("x", 1, "verified", "serving")], "x")
    with pytest.raises(InputError, match="version 9"):
        choose_release(RECORDS, None, to_version=9)
    with pytest.raises(InputError, match="matches 5 releases"):
        choose_release(RECORDS, None, to_run="2026")


def test_records_are_read_from_the_host_and_legacy_releases_from_their_verdict(tmp_path: Path) -> None:
    """A record is read as written; a release from before records is read from its verdict file,
    summary and the `current` link; a half-written directory is no release at all."""
    releases = tmp_path / "p" / "releases"
    for name in ("20261101T000000Z-a", "20261101T000000Z-a.part.4242", "20261102T000000Z-b", "20261103T000000Z-c"):
        (releases / name).mkdir(parents=True)
    (releases / "20261101T000000Z-a" / "verdict.json").write_text('{"passed": true, "run": "r1"}')
    (releases / "20261101T000000Z-a" / "release.json").write_text('{"version": 4}\n')
    (releases / "20261101T000000Z-a.part.4242" / "verdict.json").write_text('{"passed": true}')
    (releases / "20261102T000000Z-b" / "verdict.json").write_text('{"passed": false, "tune_candidate": true}')
    written = _record("20261103T000000Z-c", 5, "failed", "rolled-back")
    (releases / "20261103T000000Z-c" / "record.json").write_bytes(written.to_json())
    (tmp_path / "p" / "current").symlink_to("releases/20261102T000000Z-b")

    records = release_records(local_transport(), str(tmp_path), "p")
    assert [r.run_id for r in records] == ["20261101T000000Z-a", "20261102T000000Z-b", "20261103T000000Z-c"]
    a, b, c = records
    assert (a.version, a.life, a.verification.state, a.verification.run) == (4, "superseded", "verified", "r1")
    assert (b.life, b.verification.state, b.verification.tune_candidate) == ("serving", "none", True)
    assert c == written
    assert choose_release(records, None, to_run="20261101").run_id == "20261101T000000Z-a"  # the prefix matches one
