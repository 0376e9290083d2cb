"""A host's small state files through the CLI, in the fast tier (tests/fakes/hosts.py: a local transport,
the real lock and release scripts): an empty lock or host-identity left by an interrupted write (a full
disk, before writes were whole) is taken over a minute on, and said; `unlock` removes an empty lock."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.inputs import fast_inputs

NAME = "tiny-llama-demo"
BUDGET = ("--startup-timeout", "20")


@pytest.fixture
def one(tmp_path: Path, cli: Any, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    fake_hosts.add("h1")
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory(groups={"all": ["h1"]})))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["all"])
    yield str(v1)
    cli("stop", str(v1))


def _aged(path: Path, age_s: float = 90) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(b"")
    then = time.time() - age_s
    os.utime(path, (then, then))


def test_an_empty_lock_and_identity_a_minute_old_are_taken_over_and_said(cli: Any, one: str, fake_hosts: Any) -> None:
    """Before: the empty identity read "belongs to another machine" forever, and the empty lock
    "unreadable lock file ('')" until `unlock --force`."""
    root = fake_hosts.root("h1")
    _aged(root / "host-identity")
    _aged(root / NAME / "lock")
    result = cli("deploy", *BUDGET, one, "--hosts", "h1", "--no-verify")
    assert result.code == 0, result.stdout + result.stderr
    said = " ".join(result.stderr.split())
    assert f"took over the empty host-identity file {root}/host-identity, " in said, said
    assert f"took over the empty lock file {root}/{NAME}/lock, " in said, said
    assert (root / "host-identity").read_text().strip() and not (root / NAME / "lock").exists()


def test_unlock_removes_an_empty_lock_and_a_young_one_is_refused_as_empty(cli: Any, one: str, fake_hosts: Any) -> None:
    lock = fake_hosts.root("h1") / NAME / "lock"
    _aged(lock, age_s=0)
    young = cli("--json", "deploy", *BUDGET, one, "--hosts", "h1", "--no-verify")
    assert young.code == 3 and "an empty lock file" in json.dumps(young.json()), young.stdout
    unlocked = cli("unlock", one, "--hosts", "h1")
    assert unlocked.code == 0, unlocked.stdout + unlocked.stderr
    assert not lock.exists()


def test_stop_says_what_taking_the_lock_found(tmp_path: Path) -> None:
    """`stop` took the lock through `lock.acquire`, which threw its notes away: an empty lock taken over,
    or a root last used under another name, went unsaid. They reach its `on_note` now."""
    from specctl.flows import servers
    from specctl.hosts.inventory import HostSpec

    base = tmp_path / "root" / NAME
    base.mkdir(parents=True)
    (base / "lock").write_bytes(b"")
    then = time.time() - 120
    os.utime(base / "lock", (then, then))
    said: list[tuple[str, str]] = []
    host = HostSpec("local", str(tmp_path / "root"), None, None, {})
    result = servers.stop(
        servers.Reach(), NAME, [host], command="specctl stop", on_note=lambda h, t: said.append((h, t))
    )
    assert result == {"local": []} and not (base / "lock").exists()
    assert [h for h, t in said if "took over the empty lock file" in t] == ["local"], said


def test_the_stop_command_says_the_notes_on_stderr_and_in_its_json(cli: Any, one: str, fake_hosts: Any) -> None:
    """The command passes them on: a note per host on stderr for people, `notes` under --json."""
    lock = fake_hosts.root("h1") / NAME / "lock"
    _aged(lock)
    shown = cli("stop", one, "--hosts", "h1")
    said = " ".join(shown.stderr.split())
    assert shown.code == 0 and "note: h1: took over the empty lock file" in said, shown.stdout + shown.stderr
    _aged(lock)
    data = cli("--json", "stop", one, "--hosts", "h1").json()
    assert any("took over the empty lock file" in t for t in data["notes"]["h1"]), data
