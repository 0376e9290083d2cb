"""Which release a rollback goes back to, from what the host's release directories say."""

from __future__ import annotations

from pathlib import Path

import pytest

from specctl.errors import InputError
from specctl.flows.rollback import ReleaseState, choose_release

STATES = [
    ReleaseState("20261101T000000Z-a", 1, True),
    ReleaseState("20261102T000000Z-b", 2, True),
    ReleaseState("20261103T000000Z-c", 3, False),
    ReleaseState("20261104T000000Z-d", 3, None),
]


def test_default_is_the_newest_passing_release_that_is_not_current() -> None:
    assert choose_release(STATES, "20261104T000000Z-d").run_id == "20261102T000000Z-b"
    assert choose_release(STATES, "20261102T000000Z-b").run_id == "20261101T000000Z-a"


def test_by_run_prefix_and_by_version() -> None:
    assert choose_release(STATES, None, to_run="20261103").run_id == "20261103T000000Z-c"
    assert choose_release(STATES, None, to_version=1).run_id == "20261101T000000Z-a"
    assert choose_release(STATES, None, to_version=3).run_id == "20261104T000000Z-d"  # never verified beats failed


def test_nothing_to_go_back_to_is_a_clear_error() -> None:
    with pytest.raises(InputError, match="no verified release"):
        choose_release([ReleaseState("x", 1, False)], "y")
    with pytest.raises(InputError, match="version 9"):
        choose_release(STATES, None, to_version=9)
    with pytest.raises(InputError, match="matches 4 releases"):
        choose_release(STATES, None, to_run="2026")


def test_half_written_release_directories_are_no_rollback_targets(tmp_path: Path) -> None:
    from specctl.flows.rollback import release_states
    from specctl.hosts.local import local_transport

    releases = tmp_path / "p" / "releases"
    for name in ("20261101T000000Z-a", "20261101T000000Z-a.part.4242"):
        (releases / name).mkdir(parents=True)
        (releases / name / "verdict.json").write_text('{"passed": true}')
    states = release_states(local_transport(), str(tmp_path), "p")
    assert [s.run_id for s in states] == ["20261101T000000Z-a"]
    assert (
        choose_release(states, None, to_run="20261101").run_id == "20261101T000000Z-a"
    )  # the prefix matches one release
