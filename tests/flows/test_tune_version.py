"""tune's next profile version: free beside the profile and in the ledger, so a version names one content."""

from __future__ import annotations

from pathlib import Path

from specctl.flows.tune import next_version, recorded_versions, version_path
from specctl.ledger.ledger import Ledger
from specctl.profile.profile import Profile
from tests.factory import Scenario


def _run(book: Ledger, run_id: str, name: str, version: int) -> None:
    with book.recording(run_id, "deploy", command="c", profile={"metadata": {"name": name, "version": version}}):
        pass


def test_the_next_version_is_free_beside_the_profile_and_in_the_ledger(tmp_path: Path) -> None:
    profile = Profile.model_validate(Scenario(tmp_path).profile)  # tiny, version 1
    path = tmp_path / "profile.yaml"
    book = Ledger(tmp_path / "l.db")
    try:
        assert next_version(path, profile, recorded_versions(book, "tiny")) == 2
        version_path(path, "tiny", 2).write_text("")  # a file tune (or someone) wrote earlier
        _run(book, "r3", "tiny", 3)  # a version deployed from a file elsewhere
        _run(book, "r4", "other", 4)  # another profile's versions are its own
        recorded = recorded_versions(book, "tiny")
        assert recorded == {3}
        assert next_version(path, profile, recorded) == 4
        assert version_path(path, "tiny", 4) == tmp_path / "tiny-v4.yaml"
    finally:
        book.close()
