"""The deploy flows on several hosts, in the fast tier: three inventory hosts on local transports
(tests/fakes/hosts.py), each with its own state root and address, and the engine double for their
servers. The real release, lock and process scripts run; only SSH and the engine are stand-ins.
What tests/integration/ keeps is what needs the real edges (sshd, the reference engine)."""

from __future__ import annotations

import json
import os
import socket
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.fakes.inputs import fast_inputs, write_profile

NAME = "tiny-llama-demo"
HOSTS = ("h0", "h1", "h2")
# a server of the double answers in milliseconds: a start that hangs fails the test within this, not in 40 minutes
BUDGET = ("--startup-timeout", "20")


@pytest.fixture
def fleet(tmp_path: Path, cli: Any, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    fake_hosts.add(*HOSTS)
    inventory = fake_hosts.inventory(groups={"all": list(HOSTS)})
    monkeypatch.setenv("SPECCTL_INVENTORY", str(inventory))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, v2 = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["all"])
    yield {"v1": str(v1), "v2": str(v2), "common": [], "inventory": str(inventory), "profiles": v1.parent}
    cli("stop", str(v1))


def link(fake_hosts: Any, host: str, name: str = "current", profile: str = NAME) -> str | None:
    path = fake_hosts.root(host) / profile / name
    return path.resolve().name if path.is_symlink() else None


def rows(result: Any) -> dict[str, Any]:
    return {h["host"]: h for h in result.json()["hosts"]}


def status_of(cli: Any, profile: str, *args: str) -> dict[str, Any]:
    return rows(cli("--json", "status", profile, *args))


def test_deploy_status_logs_switch_stop(cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any) -> None:
    v1, v2, common = fleet["v1"], fleet["v2"], fleet["common"]
    result = cli("--json", "deploy", *BUDGET, v1, "--no-verify", *common)
    assert result.code == 0, result.stdout + result.stderr
    first = rows(result)
    assert set(first) == set(HOSTS) and all(h["ok"] for h in first.values())
    # each host's server is its own process, on its own address
    assert sorted(s.host for s in fake_engine.live()) == list(HOSTS)
    state = rows(cli("--json", "status", v1, *common))
    assert all(h["running"] and h["healthy"] and h["current"] == first[h["host"]]["release"] for h in state.values())
    logs = cli("logs", v1, "--hosts", "h1", *common)
    assert logs.code == 0 and "fired up and ready to roll" in logs.stdout
    second = cli("--json", "deploy", *BUDGET, v2, "--skip-check", "--no-verify", *common)
    assert second.code == 0, second.stdout + second.stderr
    after = status_of(cli, v1)
    for host in HOSTS:
        assert after[host]["current"] == rows(second)[host]["release"] != first[host]["release"]
        assert after[host]["healthy"] and link(fake_hosts, host) == after[host]["current"]
        assert [s["release"] for s in after[host]["servers"]] == [after[host]["current"]]  # v1's stopped first
    stopped = cli("--json", "stop", v1, *common).json()["stopped"]
    assert stopped == {host: True for host in HOSTS}
    assert not fake_engine.live()
    assert not any(h["running"] or h["servers"] for h in status_of(cli, v1).values())


def test_one_host_failing_rolls_the_others_back_unless_max_failures_allows_it(
    cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any
) -> None:
    v1, v2, common = fleet["v1"], fleet["v2"], fleet["common"]
    assert cli("deploy", *BUDGET, v1, "--no-verify", *common).code == 0
    good = {host: link(fake_hosts, host) for host in HOSTS}
    fake_engine.on(version=2, host="h1", start="crash")
    refused = cli("--json", "deploy", *BUDGET, v2, "--skip-check", "--no-verify", *common)
    assert refused.code == 3, refused.stdout + refused.stderr
    assert not rows(refused)["h1"]["ok"] and "exited during start-up" in rows(refused)["h1"]["detail"]
    assert {host: link(fake_hosts, host) for host in HOSTS} == good  # the others went back too
    assert all(h["healthy"] for h in status_of(cli, v1).values())

    allowed = cli("--json", "deploy", *BUDGET, v2, "--skip-check", "--no-verify", "--max-failures", "1", *common)
    assert allowed.code == 3, allowed.stdout + allowed.stderr
    after = rows(allowed)
    assert not after["h1"]["ok"] and after["h0"]["ok"] and after["h2"]["ok"], allowed.stdout
    assert link(fake_hosts, "h1") == good["h1"]
    assert link(fake_hosts, "h0") == after["h0"]["release"] != good["h0"]
    assert link(fake_hosts, "h2") == after["h2"]["release"] != good["h2"]


def test_stale_lock_refuses_then_unlock_shows_owner(cli: Any, fleet: dict[str, Any], fake_hosts: Any) -> None:
    base = fake_hosts.root("h1") / NAME
    base.mkdir(parents=True, exist_ok=True)
    (base / "lock").write_text(
        '{"user": "alice", "machine": "laptop", "pid": 4242, "since": "2026-11-28T10:00:00Z", '
        '"run_id": "x", "command": "specctl deploy"}\n'
    )
    result = cli("--json", "deploy", *BUDGET, fleet["v1"], "--hosts", "h1", "--no-verify", *fleet["common"])
    assert result.code == 3
    [h1] = result.json()["hosts"]
    assert not h1["ok"] and "locked by alice@laptop pid 4242" in h1["detail"]
    refused = cli("unlock", fleet["v1"], "--hosts", "h1", *fleet["common"])  # another machine: alive or not, unknown
    said = " ".join(refused.stderr.split())
    assert refused.code == 3 and "on another machine" in said and "--force" in said
    unlocked = cli("unlock", fleet["v1"], "--hosts", "h1", "--force", *fleet["common"])
    assert unlocked.code == 0 and "alice@laptop" in unlocked.stdout and not (base / "lock").exists()
    assert cli("deploy", *BUDGET, fleet["v1"], "--hosts", "h1", "--no-verify", *fleet["common"]).code == 0


@pytest.mark.parametrize("holder", ["exited", "recycled"])
def test_a_lock_whose_holder_is_provably_gone_is_taken_over_and_said(
    cli: Any, fleet: dict[str, Any], fake_hosts: Any, holder: str
) -> None:
    """A deploy killed on this machine left its lock: its pid is gone, or now names a later process
    (this very test process, with another start time). The next verb takes the lock over and says so;
    `unlock` is for holders whose fate cannot be known (another machine)."""
    if holder == "exited":
        child = subprocess.Popen(["true"])
        child.wait()
        pid = child.pid
    else:
        pid = os.getpid()  # this process's pid, with a start time that is not this process's
    started = "1"
    base = fake_hosts.root("h1") / NAME
    base.mkdir(parents=True, exist_ok=True)
    (base / "lock").write_text(
        json.dumps(
            {
                "user": "bob",
                "machine": socket.gethostname(),
                "pid": pid,
                "started": started,
                "since": "2026-12-03T10:00:00Z",
                "run_id": "x",
                "command": "specctl deploy",
            }
        )
        + "\n"
    )
    result = cli("deploy", *BUDGET, fleet["v1"], "--hosts", "h1", "--no-verify", *fleet["common"])
    assert result.code == 0, result.stdout + result.stderr
    said = " ".join(result.stderr.split())
    assert f"took over the lock of bob@{socket.gethostname()} pid {pid}" in said and "its process is gone" in said
    assert not (base / "lock").exists() and not list(base.glob("lock.stale.*"))


def test_a_state_root_another_machine_wrote_is_refused_before_anything_is_written(
    cli: Any, fleet: dict[str, Any], fake_hosts: Any
) -> None:
    """A home directory shared by several hosts (NFS): the root's identity names another machine."""
    root = fake_hosts.root("h1")
    assert cli("deploy", *BUDGET, fleet["v1"], "--hosts", "h1", "--no-verify", *fleet["common"]).code == 0
    mine = (root / "host-identity").read_text()
    machine_id = Path("/etc/machine-id").read_text().strip() if Path("/etc/machine-id").exists() else ""
    assert mine.split()[0] == (machine_id or mine.split()[1])  # without a machine-id: the hostname
    (root / "host-identity").write_text("0123456789abcdef0123456789abcdef gpu-node-7\n")
    before = sorted(p.name for p in (root / NAME / "releases").iterdir())
    result = cli("--json", "deploy", *BUDGET, fleet["v1"], "--hosts", "h1", "--no-verify", *fleet["common"])
    assert result.code == 3, result.stdout + result.stderr
    [h1] = result.json()["hosts"]
    assert "belongs to another machine (gpu-node-7, machine-id 0123456789ab)" in h1["detail"]
    assert "set `root:` for h1 in the inventory" in " ".join(result.stdout.split())
    assert (
        sorted(p.name for p in (root / NAME / "releases").iterdir()) == before and not (root / NAME / "lock").exists()
    )
    stopped = cli("--json", "stop", fleet["v1"], "--hosts", "h1", *fleet["common"])
    assert "belongs to another machine" in stopped.stdout  # stop signals nothing on another machine's root either


def test_server_dying_at_startup_shows_its_log_and_restores_the_previous_release(
    cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any
) -> None:
    common = [*fleet["common"], "--hosts", "h2"]
    assert cli("deploy", *BUDGET, fleet["v1"], "--no-verify", *common).code == 0
    before = link(fake_hosts, "h2")
    broken = write_profile(fleet["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3)
    fake_engine.on(version=3, start="exit", exit_log=["capture position 9 is not captured: the model has 4 layers"])
    result = cli("--json", "deploy", *BUDGET, str(broken), "--skip-check", "--no-verify", *common)
    assert result.code == 3
    [h2] = result.json()["hosts"]
    assert "exited during start-up" in h2["detail"] and f"restored {before}" in h2["detail"]
    assert any("capture position 9" in line for line in h2["log_tail"])
    assert link(fake_hosts, "h2") == before
    assert cli("--json", "status", fleet["v1"], *common).json()["hosts"][0]["healthy"]


def test_readiness_timeout_restores_the_previous_release(
    cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any
) -> None:
    common = [*fleet["common"], "--hosts", "h0"]
    assert cli("deploy", *BUDGET, fleet["v1"], "--no-verify", *common).code == 0
    before = link(fake_hosts, "h0")
    fake_engine.on(version=2, start="hang")
    result = cli(
        "--json", "deploy", *BUDGET, fleet["v2"], "--skip-check", "--no-verify", "--startup-timeout", "1", *common
    )
    assert result.code == 3, result.stdout + result.stderr
    [h0] = result.json()["hosts"]
    assert "no generation within the 1 s start-up budget" in h0["detail"] and f"restored {before}" in h0["detail"]
    assert link(fake_hosts, "h0") == before
    state = status_of(cli, fleet["v1"], *common)["h0"]
    assert state["healthy"] and [s["release"] for s in state["servers"]] == [before]  # the hung one was stopped


def test_dry_run_changes_nothing(cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any) -> None:
    before = sorted(str(p) for p in fake_hosts.root("h0").rglob("*"))
    result = cli("--json", "deploy", *BUDGET, fleet["v1"], "--dry-run", "--hosts", "h0", *fleet["common"])
    assert result.code == 0, result.stderr
    [row] = result.json()["dry_run"]
    assert row["host"] == "h0" and row["would_deploy"].startswith("v1")
    assert sorted(str(p) for p in fake_hosts.root("h0").rglob("*")) == before and not fake_engine.servers


def test_dry_run_proves_the_release_on_the_host(
    cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    good = cli("--json", "deploy", *BUDGET, fleet["v1"], "--dry-run", "--hosts", "h0", *fleet["common"])
    assert good.code == 0, good.stderr
    [row] = good.json()["dry_run"]
    assert row["prove"]["ok"] and row["prove"]["problems"] == [] and row["prove"]["engine"]["check"] is None, row
    monkeypatch.delenv("SPECCTL_TEST_UNSET_SECRET", raising=False)
    bad = write_profile(
        Path(fleet["v1"]).parent / "v3.yaml",
        fleet["v1"],
        3,
        secrets=["SPECCTL_TEST_UNSET_SECRET"],
        engine={"args": {"no-such-flag": 1}},
    )
    before = sorted(str(p) for p in fake_hosts.root("h0").rglob("*"))
    result = cli("--json", "deploy", *BUDGET, str(bad), "--dry-run", "--skip-check", "--hosts", "h0", *fleet["common"])
    [row] = result.json()["dry_run"]
    assert not row["prove"]["ok"]
    checks = {p["check"]: p["message"] for p in row["prove"]["problems"]}
    assert "SPECCTL_TEST_UNSET_SECRET" in checks["secret"] and "--no-such-flag" in checks["engine-parse"], checks
    assert sorted(str(p) for p in fake_hosts.root("h0").rglob("*")) == before and not fake_engine.servers


def test_an_unreachable_host_fails_alone_before_anything_stops(
    cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any
) -> None:
    v1, v2, common = fleet["v1"], fleet["v2"], fleet["common"]
    assert cli("deploy", *BUDGET, v1, "--no-verify", *common).code == 0
    good = {host: link(fake_hosts, host) for host in HOSTS}
    fake_hosts.down.add("h2")
    result = cli("--json", "deploy", *BUDGET, v2, "--skip-check", "--no-verify", *common)
    assert result.code == 3, result.stdout + result.stderr
    assert not rows(result)["h2"]["ok"] and "connection refused" in rows(result)["h2"]["detail"]
    fake_hosts.down.clear()
    assert {host: link(fake_hosts, host) for host in HOSTS} == good
    assert sorted(s.host for s in fake_engine.live()) == list(HOSTS)  # nothing was stopped anywhere


def test_multi_node_profile_on_two_hosts(cli: Any, fleet: dict[str, Any], fake_hosts: Any, fake_engine: Any) -> None:
    v1 = Path(fleet["v1"])
    multi = v1.parent / "tiny-llama-2node.yaml"
    data = yaml.safe_load(v1.read_text())
    data["metadata"] = {"name": "tiny-llama-2node", "version": 1}
    data["parallel"] = {"tp": 1, "nnodes": 2, "dist_init_port": 29555}
    data["hosts"] = ["h0", "h1"]
    data["hardware"]["gpus_per_node"] = 1
    multi.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        result = cli("--json", "deploy", *BUDGET, str(multi), "--skip-check", "--no-verify", *fleet["common"])
        assert result.code == 0, result.stdout + result.stderr
        assert [h["host"] for h in result.json()["hosts"]] == ["h0", "h1"]
        launch = [(fake_hosts.root(h) / "tiny-llama-2node" / "current" / "launch.sh").read_text() for h in ("h0", "h1")]
        addr = f"{fake_hosts.hosts['h0'][1]}:29555"
        assert "--node-rank 0" in launch[0] and "--node-rank 1" in launch[1]
        assert all(addr in text for text in launch)
        status = rows(cli("--json", "status", str(multi), *fleet["common"]))
        assert status["h0"]["healthy"] and status["h1"]["running"]  # rank 1 serves no HTTP
    finally:
        cli("stop", str(multi), *fleet["common"])


def test_without_a_terminal_each_host_says_each_stage_once_and_the_deploy_ends_with_one_recap(
    cli: Any, fleet: dict[str, Any]
) -> None:
    result = cli("deploy", *BUDGET, fleet["v1"])
    assert result.code == 0, result.stdout + result.stderr
    stages = [
        "preflight",
        "writing the release",
        "proving the release",
        "stopping the running server",
        "starting",
        "waiting until it serves",
        "switching current",
        "verifying",
    ]
    lines = result.stderr.splitlines()
    for host in HOSTS:  # in order, once each: no request counters, no phase repeated
        assert [line.removeprefix(f"{host}: ") for line in lines if line.startswith(f"{host}: ")] == stages
    assert len(lines) == len(HOSTS) * len(stages)
    out = result.stdout.splitlines()
    assert out[0] == "deploy tiny-llama-demo v1" and out[1].split()[:3] == ["host", "release", "state"]
    assert [row.split()[0] for row in out[2:]] == list(HOSTS)  # one recap row per host, nothing else
    assert all("serving" in row and "pass" in row for row in out[2:])
    events = [json.loads(line) for line in cli("--json", "deploy", *BUDGET, fleet["v1"]).stderr.splitlines()]
    began = [(e["host"], e["step"]) for e in events if e["event"] == "step" and e["state"] == "began"]
    assert sorted(began) == sorted((h, s) for h in HOSTS for s in (*STEPS, "verify"))


STEPS = ("preflight", "materialise", "prove", "stop-previous", "start", "ready", "switch")
