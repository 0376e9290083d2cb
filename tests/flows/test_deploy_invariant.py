"""The deploy's invariant, step by step, on the local host with the engine double (tests/fakes/engine.py:
the real release scripts, a stub process for the server): a failure at any step leaves `current`
naming a running server (the previous one) and nothing else of the profile running."""

from __future__ import annotations

import json
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


# --- prove, then stop: a release that cannot start is refused before the serving one stops -------------------


def _serving_pid(local: dict[str, Any]) -> int:
    pid = int((local["root"] / "releases" / local["good"] / "server.pid").read_text())
    os.kill(pid, 0)  # alive
    return pid


def _refused_before_the_stop(local: dict[str, Any], cli: Any, profile: Path, step: str, *words: str) -> str:
    """Deploy `profile`: exit 3 at `step`, nothing stopped, `current` and the serving pid unchanged."""
    pid = _serving_pid(local)
    result = cli("--json", "deploy", str(profile), "--skip-check", "--no-verify", *local["common"])
    assert result.code == 3, result.stdout + result.stderr
    [row] = result.json()["hosts"]
    assert not row["ok"] and all(w in row["detail"] for w in words), row["detail"]
    assert _serving_pid(local) == pid
    assert os.readlink(local["root"] / "current").rsplit("/", 1)[-1] == local["good"]
    run = cli("--json", "runs", "--kind", "deploy", *local["common"]).json()["runs"][-1]["id"]
    events = {(e["step"], e["event"]) for e in cli("--json", "show", run, *local["common"]).json()["events"]}
    assert (step, "failed") in events and not any(s == "stop-previous" for s, _ in events), events
    return str(row["detail"])


def test_a_missing_engine_python_fails_preflight_before_anything_stops(local: dict[str, Any], cli: Any) -> None:
    from tests.fakes.inputs import write_profile

    v3 = write_profile(
        Path(local["v1"]).parent / "v3.yaml", local["v1"], 3, engine={"python": "/nonexistent/bin/python3"}
    )
    _refused_before_the_stop(local, cli, v3, "preflight", "host-python", "/nonexistent/bin/python3")


def test_an_unset_secret_fails_prove_naming_it(
    local: dict[str, Any], cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tests.fakes.inputs import write_profile

    monkeypatch.delenv("SPECCTL_TEST_UNSET_SECRET", raising=False)
    v3 = write_profile(Path(local["v1"]).parent / "v3.yaml", local["v1"], 3, secrets=["SPECCTL_TEST_UNSET_SECRET"])
    detail = _refused_before_the_stop(local, cli, v3, "prove", "secret", "SPECCTL_TEST_UNSET_SECRET")
    assert "not set" in detail


def test_an_argv_the_engines_parser_refuses_fails_prove(local: dict[str, Any], cli: Any) -> None:
    from tests.fakes.inputs import write_profile

    v3 = write_profile(Path(local["v1"]).parent / "v3.yaml", local["v1"], 3, engine={"args": {"no-such-flag": 1}})
    _refused_before_the_stop(local, cli, v3, "prove", "engine-parse", "--no-such-flag")


def test_a_port_on_engine_host_held_by_a_stranger_fails_preflight(local: dict[str, Any], cli: Any) -> None:
    import socket

    from tests.fakes.inputs import write_profile

    with socket.socket() as stranger:
        stranger.bind(("127.0.0.1", 0))
        stranger.listen()
        port = stranger.getsockname()[1]
        v3 = write_profile(Path(local["v1"]).parent / "v3.yaml", local["v1"], 3, engine={"port": port})
        _refused_before_the_stop(local, cli, v3, "preflight", f"port {port} is in use on 127.0.0.1")


def test_a_rollback_to_a_release_whose_engine_changed_is_refused_before_the_stop(
    local: dict[str, Any], cli: Any
) -> None:
    import json

    second = cli("--json", "deploy", local["v1"], "--no-verify", *local["common"])
    assert second.code == 0, second.stdout + second.stderr
    newer = second.json()["hosts"][0]["release"]
    facts = local["root"] / "releases" / local["good"] / "host-facts.json"
    data = json.loads(facts.read_text())
    data["engine_version"] = "0.0.1-before-the-upgrade"
    facts.write_text(json.dumps(data))
    pid = int((local["root"] / "releases" / newer / "server.pid").read_text())
    result = cli("--json", "rollback", local["v1"], "--to", local["good"], *local["common"])
    assert result.code == 3, result.stdout + result.stderr
    assert "0.0.1-before-the-upgrade" in result.stdout + result.stderr
    os.kill(pid, 0)
    assert os.readlink(local["root"] / "current").rsplit("/", 1)[-1] == newer


def test_a_compute_process_on_the_gpus_that_is_not_ours_is_named_a_warning(
    local: dict[str, Any], cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """nvidia-smi (a stand-in on PATH) lists a compute process of no server of the profile: the deploy
    goes on, and says which process it is."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    smi = bin_dir / "nvidia-smi"
    smi.write_text(
        '#!/bin/sh\ncase "$*" in *query-compute-apps*) echo "1, /opt/other/bin/trainer";; esac\nexit 0\n'
    )  # pid 1: a process group no server of the profile has
    smi.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{os.environ['PATH']}")
    result = cli("--json", "deploy", local["v2"], "--skip-check", "--no-verify", *local["common"])
    assert result.code == 0, result.stdout + result.stderr
    notes = [json.loads(line).get("text", "") for line in result.stderr.splitlines() if line.startswith("{")]
    assert any("/opt/other/bin/trainer (pid 1)" in n and n.startswith("warning") for n in notes), notes
