"""The deploy's invariant, step by step, on the local host with the engine double (tests/fakes/engine.py:
the real release scripts, a stub process for the server): a failure at any step leaves `current`
naming a running server (the previous one) and nothing else of the profile running."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from specctl.errors import HostError
from specctl.flows import change
from tests.fakes.inputs import fast_inputs

NAME = "tiny-llama-demo"


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any, fake_engine: Any) -> Any:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the local host's state root is ~/.specctl/hosts/local
    v1, v2 = fast_inputs(tmp_path / "work", fake_engine)
    common = ["--ledger", str(tmp_path / "ledger.db")]
    first = cli("--json", "deploy", str(v1), "--no-verify", *common)
    assert first.code == 0, first.stdout + first.stderr
    yield {
        "v1": str(v1),
        "v2": str(v2),
        "common": common,
        "good": first.json()["hosts"][0]["release"],
        "root": tmp_path / "home" / ".specctl" / "hosts" / "local" / NAME,
    }
    cli("stop", str(v1))


@pytest.mark.parametrize("failing", ["materialise", "stop_previous", "start", "ready", "switch"])
def test_a_failure_at_any_step_leaves_the_previous_release_serving(
    local: dict[str, Any], cli: Any, failing: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The step before `failing` has done its work; `failing` raises before doing any."""

    def broken(c: change.Change) -> None:
        raise HostError(f"injected failure at {failing}", host="local")

    monkeypatch.setattr(change, failing, broken)
    result = cli("--json", "deploy", local["v2"], "--skip-check", "--no-verify", *local["common"])
    assert result.code == 3, result.stdout + result.stderr
    [row] = result.json()["hosts"]
    assert f"injected failure at {failing}" in row["detail"] and not row["ok"]
    assert os.readlink(local["root"] / "current").rsplit("/", 1)[-1] == local["good"]
    state = cli("--json", "status", local["v1"]).json()["hosts"][0]
    assert state["current"] == local["good"] and state["healthy"]
    assert [s["release"] for s in state["servers"]] == [local["good"]]
    run = cli("--json", "runs", "--kind", "deploy", *local["common"]).json()["runs"][-1]["id"]
    events = cli("--json", "show", run, *local["common"]).json()["events"]
    assert ("local", failing.replace("_", "-"), "failed") in {(e["host"], e["step"], e["event"]) for e in events}
    assert not (local["root"] / "lock").exists()  # a failed host's lock goes with the command


def test_a_failure_in_verify_rolls_back_to_the_verified_release(
    local: dict[str, Any], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    verified = cli("--json", "deploy", local["v1"], *local["common"])  # verified: a rollback target
    assert verified.code == 0, verified.stdout + verified.stderr
    good = verified.json()["hosts"][0]["release"]
    from specctl.flows import deploy

    def broken(*args: Any, **kwargs: Any) -> Any:
        raise HostError("injected failure in verify", host="local")

    monkeypatch.setattr(deploy, "verify_and_record", broken)
    result = cli("--json", "deploy", local["v2"], "--skip-check", *local["common"])
    assert result.code == 4, result.stdout + result.stderr
    [row] = result.json()["hosts"]
    assert "verify could not run: injected failure in verify" in row["detail"] and row["rolled_back_to"] == good
    state = cli("--json", "status", local["v1"]).json()["hosts"][0]
    assert state["current"] == good and state["healthy"] and [s["release"] for s in state["servers"]] == [good]


def test_the_runs_copy_is_written_under_the_lock_and_releases_it_in_the_same_command(
    local: dict[str, Any], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specctl.hosts.transport import Transport

    sent: list[list[str]] = []
    run = Transport.run

    def counting(self: Transport, argv: Any, **kwargs: Any) -> Any:
        sent.append([str(a) for a in argv])
        return run(self, argv, **kwargs)

    monkeypatch.setattr(Transport, "run", counting)
    result = cli("--json", "deploy", local["v2"], "--skip-check", "--no-verify", *local["common"])
    assert result.code == 0, result.stdout + result.stderr
    release = result.json()["hosts"][0]["release"]
    last = sent[-1]
    assert any(a.endswith(f"releases/{release}/runs/{release}.json") for a in last)
    assert last[-3:] == ["rm", "-f", str(local["root"] / "lock")]
    assert sum("lock" in " ".join(argv) for argv in sent) == 2  # taken once, released once
    assert not (local["root"] / "lock").exists()
    assert (local["root"] / "releases" / release / "runs" / f"{release}.json").is_file()


def test_a_deploy_stopped_after_its_hosts_leaves_no_lock(
    local: dict[str, Any], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from specctl.flows.recorder import Recorder

    def broken(self: Recorder, kept: Any) -> None:
        raise RuntimeError("injected failure before the keep")

    monkeypatch.setattr(Recorder, "keep_all", broken)
    result = cli("--json", "deploy", local["v2"], "--skip-check", "--no-verify", *local["common"])
    assert result.code != 0 and "injected failure before the keep" in result.stderr
    assert not (local["root"] / "lock").exists()
