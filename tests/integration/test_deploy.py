"""`specctl deploy` end to end on real OpenSSH hosts with the reference engine: parallel deploy,
status, logs, an atomic switch to a new version, stop; node ranks meeting across hosts; inventory
strings through ssh. The flows' branches (a stale lock and unlock, a server dying at start-up, dry-run,
--max-failures, several hosts) run in the fast tier: tests/flows/test_fleet.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import paramiko
import pytest
import yaml

from specctl.flows.demo import MIN_ACCEPT_LENGTH, write_inputs
from specctl.hosts._ssh_runner import SshRunner
from tests.integration.sshd import SshLab, namespaces_work

PORT = 31500


@pytest.fixture
def fleet(lab: SshLab, tmp_path: Path) -> dict[str, Any]:
    if not lab.use_namespaces:
        pytest.skip("several hosts on one loopback address would share the profile's port")
    v1, v2 = write_inputs(tmp_path, PORT)
    for path in (v1,):
        data = yaml.safe_load(path.read_text())
        data["engine"]["host"] = "0.0.0.0"
        data["hosts"] = ["all"]
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    inventory = lab.inventory(tmp_path / "hosts.yaml", sys.executable)
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config)]
    yield {"v1": str(v1), "v2": str(v2), "common": common, "tmp": tmp_path}


def test_deploy_status_logs_switch_stop(
    cli: Any, lab: SshLab, fleet: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    v1, v2, common = fleet["v1"], fleet["v2"], fleet["common"]
    opened: list[tuple[str, paramiko.SSHClient]] = []
    connect = SshRunner._connect

    def counted(runner: SshRunner) -> paramiko.SSHClient:
        client = connect(runner)
        opened.append((runner.destination.alias, client))
        return client

    monkeypatch.setattr(SshRunner, "_connect", counted)
    result = cli("--json", "deploy", v1, *common)
    assert result.code == 0, result.stdout + result.stderr
    # one connection per host for the whole command (the checkpoint read, the stages, the ledger's
    # copy), and none left open when it returns, though the command ran inside this process
    assert sorted(alias for alias, _ in opened) == ["h0", "h1", "h2"]
    assert not [alias for alias, client in opened if (t := client.get_transport()) is not None and t.is_active()]
    first = {h["host"]: h for h in result.json()["hosts"]}
    assert set(first) == {"h0", "h1", "h2"} and all(h["ok"] for h in first.values())
    status = {h["host"]: h for h in cli("--json", "status", v1, *common).json()["hosts"]}
    assert all(h["running"] and h["healthy"] for h in status.values())
    logs = cli("logs", v1, "--hosts", "h1", *common)
    assert "fired up and ready to roll" in logs.stdout
    # a new version switches `current` on every host
    second = cli("--json", "deploy", v2, "--skip-check", *common)
    assert second.code == 0, second.stderr
    after = {h["host"]: h for h in cli("--json", "status", v1, *common).json()["hosts"]}
    for host in ("h0", "h1", "h2"):
        assert after[host]["current"] != first[host]["release"] and after[host]["healthy"]
        link = lab.hosts[host].root / "tiny-llama-demo" / "current"
        assert link.is_symlink() and link.resolve().name == after[host]["current"]
    stopped = cli("--json", "stop", v1, *common).json()["stopped"]
    assert stopped == {"h0": True, "h1": True, "h2": True}
    # a known race, not yet understood: now and then a status right after a stop still lists the
    # stopped server for a moment; what is asserted is that it is gone within a few seconds
    deadline = time.monotonic() + 10
    while True:
        after_stop = cli("--json", "status", v1, *common).json()["hosts"]
        if not any(h["running"] or h["servers"] for h in after_stop):
            break
        assert time.monotonic() < deadline, [(h["host"], h["servers"]) for h in after_stop]
        time.sleep(0.5)


def _two_node(source: Path, dest: Path) -> Path:
    data = yaml.safe_load(source.read_text())
    data["metadata"] = {"name": "tiny-llama-2node", "version": 1}
    data["parallel"] = {"tp": 1, "nnodes": 2, "dist_init_port": 29555}
    data["hosts"] = ["h0", "h1"]
    data["engine"]["host"] = "0.0.0.0"
    data["hardware"]["gpus_per_node"] = 1
    data["verify"]["min_accept_length"] = MIN_ACCEPT_LENGTH  # about 3.5 on the right layers, 1.9 on v2's
    dest.write_text(yaml.safe_dump(data, sort_keys=False))
    return dest


def test_multi_node_profile_on_two_hosts_and_back_after_a_failed_verify(
    cli: Any, lab: SshLab, fleet: dict[str, Any]
) -> None:
    """Node ranks meet across hosts; a release whose verify fails through node rank 0 is replaced on
    both ranks at once by the one that served before, and both hosts' records say so."""
    v1 = Path(fleet["v1"])
    multi = _two_node(v1, v1.parent / "tiny-llama-2node.yaml")
    common = fleet["common"]
    result = cli(
        "--json", "deploy", str(multi), "--skip-check", *common
    )  # tp 1 over 2 nodes is a check error, fine for the rehearsal
    assert result.code == 0, result.stdout + result.stderr
    hosts = result.json()["hosts"]
    assert [h["host"] for h in hosts] == ["h0", "h1"] and all(h["ok"] for h in hosts)
    good = hosts[0]["release"]
    base = {h: lab.hosts[h].root / "tiny-llama-2node" for h in ("h0", "h1")}
    launch = [(base[h] / "current" / "launch.sh").read_text() for h in ("h0", "h1")]
    addr = f"{lab.hosts['h0'].address}:29555"
    assert "--node-rank 0" in launch[0] and "--node-rank 1" in launch[1] and all(addr in text for text in launch)
    status = {h["host"]: h for h in cli("--json", "status", str(multi), *common).json()["hosts"]}
    assert status["h0"]["healthy"] and status["h1"]["running"]  # rank 1 serves no HTTP, like a non-zero sglang rank

    wrong = v1.parent / "tiny-llama-2node-v2.yaml"  # v2's same-width wrong layers, over two nodes
    layers = yaml.safe_load(Path(fleet["v2"]).read_text())["drafter"]
    wrong.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": multi.name,
                "metadata": {"name": "tiny-llama-2node", "version": 2},
                "drafter": layers,
            }
        )
    )
    failed = cli("--json", "deploy", str(wrong), "--skip-check", *common)
    assert failed.code == 4, failed.stdout + failed.stderr
    rows = failed.json()["hosts"]
    bad = rows[0]["release"]
    assert [(h["rolled_back_to"], h["verdict"]["passed"]) for h in rows] == [(good, False), (good, False)]
    assert rows[0]["rollback_verdict"]["passed"]
    for h in ("h0", "h1"):
        assert (base[h] / "current").resolve().name == good
        records = {r: json.loads((base[h] / "releases" / r / "record.json").read_text()) for r in (good, bad)}
        assert (records[good]["life"], records[good]["verification"]["state"]) == ("serving", "verified"), h
        assert (records[bad]["life"], records[bad]["verification"]["state"]) == ("rolled-back", "failed"), h
    status = {h["host"]: h for h in cli("--json", "status", str(multi), *common).json()["hosts"]}
    assert status["h0"]["healthy"] and status["h1"]["running"] and status["h1"]["current"] == good
    cli("stop", str(multi), *common)


def test_inventory_strings_reach_the_host_as_data(cli: Any, lab: SshLab, fleet: dict[str, Any], tmp_path: Path) -> None:
    odd = tmp_path / "state dir; touch /tmp/pwned-$(id -u) 'quoted' `x`"
    inventory = tmp_path / "hosts-odd.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Inventory",
                "hosts": {"h0": {"ssh": "h0", "root": str(odd), "python": sys.executable}},
            }
        )
    )
    result = cli(
        "--json",
        "deploy",
        fleet["v1"],
        "--hosts",
        "h0",
        "--inventory",
        str(inventory),
        "--ssh-config",
        str(lab.ssh_config),
    )
    assert result.code == 0, result.stdout + result.stderr
    assert (odd / "tiny-llama-demo" / "current" / "launch.sh").exists()
    assert not list(Path("/tmp").glob("pwned-*"))
    cli("stop", fleet["v1"], "--hosts", "h0", "--inventory", str(inventory), "--ssh-config", str(lab.ssh_config))


def test_a_process_behind_a_recycled_pid_survives_stop_and_status_names_it(
    cli: Any, lab: SshLab, fleet: dict[str, Any]
) -> None:
    """The server is gone and its pid now belongs to another process: `stop` signals nothing it cannot
    prove it started there (start time and mark, read from /proc on the host), and `status` says so."""
    common = [*fleet["common"], "--hosts", "h0"]
    deployed = cli("--json", "deploy", fleet["v1"], "--baseline", "skip", *common)
    assert deployed.code == 0, deployed.stdout + deployed.stderr
    release = lab.hosts["h0"].root / "tiny-llama-demo" / "releases" / deployed.json()["hosts"][0]["release"]
    assert cli("stop", fleet["v1"], *common).code == 0
    env = {k: v for k, v in os.environ.items() if not k.startswith("SPECCTL_")}
    stranger = subprocess.Popen(["setsid", "sleep", "120"], env=env)  # the lab's hosts share this process table
    try:
        (release / "server.pid").write_text(f"{stranger.pid}\n")
        assert cli("--json", "stop", fleet["v1"], *common).json()["stopped"] == {"h0": False}
        assert stranger.poll() is None
        [h0] = cli("--json", "status", fleet["v1"], *common).json()["hosts"]
        assert not h0["running"] and h0["servers"] == []
        assert h0["strangers"] == [
            f"pid {stranger.pid} (in release {release.name}'s pid file) is not the server specctl started on h0; "
            "left alone"
        ]
        assert "left alone" in h0["state"]
    finally:
        stranger.kill()
        stranger.wait()


@pytest.fixture(scope="module")
def machines(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshLab]:
    """Two sshd hosts that are machines of their own (machine-id and hostname) and mount one home
    directory (as over NFS), in a lab of their own."""
    if not namespaces_work():
        pytest.skip("machines of their own need root and network namespaces")
    workdir = tmp_path_factory.mktemp("machines")
    lab = SshLab(workdir, True, tag=f"{os.getpid() % 10000}m", own_machines=True, home=workdir / "home")
    try:
        lab.start(2)
        yield lab
    finally:
        lab.stop()


def test_default_roots_are_one_per_host_on_a_shared_home_and_an_old_root_is_adopted_in_place(
    cli: Any, machines: SshLab, fleet: dict[str, Any], tmp_path: Path
) -> None:
    """h0 and h1 (two machines) mount one home. h0 was deployed to by an earlier specctl, whose default
    root was ~/.specctl; with today's default (no `root:`) h0 keeps that root, its running server
    found and provably its own, and h1 gets ~/.specctl/hosts/h1: neither sees the other's state."""
    lab, home = machines, machines.home
    assert home is not None

    def inventory(roots: dict[str, str | None]) -> list[str]:
        path = tmp_path / f"hosts-{len(roots)}.yaml"
        hosts = {h: {"ssh": h, "python": sys.executable, **({"root": r} if r else {})} for h, r in roots.items()}
        path.write_text(yaml.safe_dump({"apiVersion": "specctl/v1", "kind": "Inventory", "hosts": hosts}))
        return ["--inventory", str(path), "--ssh-config", str(lab.ssh_config)]

    old = inventory({"h0": "~/.specctl"})  # the default of earlier versions
    new = inventory({"h0": None, "h1": None})
    try:
        first = cli("--json", "deploy", fleet["v1"], "--hosts", "h0", "--baseline", "skip", *old)
        assert first.code == 0, first.stdout + first.stderr
        serving = first.json()["hosts"][0]["release"]
        [h0] = cli("--json", "status", fleet["v1"], "--hosts", "h0", *new).json()["hosts"]
        assert h0["current"] == serving and h0["healthy"]  # adopted in place: nothing moved, nothing lost
        assert os.readlink(home / ".specctl" / "adopted-by") == "h0"
        second = cli("--json", "deploy", fleet["v1"], "--hosts", "h1", "--baseline", "skip", *new)
        assert second.code == 0, second.stdout + second.stderr
        own = home / ".specctl" / "hosts" / "h1"
        assert (own / "tiny-llama-demo" / "current").resolve().name == second.json()["hosts"][0]["release"]
        assert (own / "host-identity").read_text().split()[1] == "h1"
        stopped = cli("--json", "stop", fleet["v1"], "--hosts", "h0", *new)
        assert stopped.code == 0, stopped.stdout + stopped.stderr
        rows = {r["host"]: r for r in cli("--json", "status", fleet["v1"], "--hosts", "h0,h1", *new).json()["hosts"]}
        assert not rows["h0"]["running"] and rows["h1"]["healthy"]  # the stop touched h0's server alone
    finally:
        cli("stop", fleet["v1"], "--hosts", "h0,h1", *new)


def test_two_hosts_on_one_shared_home_are_refused_a_common_state_root(
    cli: Any, machines: SshLab, fleet: dict[str, Any], tmp_path: Path
) -> None:
    """h0 and h1 (each a machine of its own: machine-id and hostname) mount one home: the second host
    to use the shared root is refused before it writes anything, with the fix."""
    lab = machines
    shared = tmp_path / "nfs-home" / ".specctl"
    inventory = tmp_path / "hosts-shared.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Inventory",
                "hosts": {h: {"ssh": h, "root": str(shared), "python": sys.executable} for h in ("h0", "h1")},
            }
        )
    )
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config)]
    try:
        first = cli("--json", "deploy", fleet["v1"], "--hosts", "h0", "--baseline", "skip", *common)
        assert first.code == 0, first.stdout + first.stderr
        assert (shared / "host-identity").read_text().split()[1] == "h0"
        releases = sorted(p.name for p in (shared / "tiny-llama-demo" / "releases").iterdir())
        second = cli("--json", "deploy", fleet["v1"], "--hosts", "h1", "--baseline", "skip", *common)
        assert second.code == 3, second.stdout + second.stderr
        [h1] = second.json()["hosts"]
        assert f"the state directory {shared} belongs to another machine (h0" in h1["detail"]
        assert sorted(p.name for p in (shared / "tiny-llama-demo" / "releases").iterdir()) == releases
        [h0] = cli("--json", "status", fleet["v1"], "--hosts", "h0", *common).json()["hosts"]
        assert h0["healthy"]  # h0's server was never touched
    finally:
        cli("stop", fleet["v1"], "--hosts", "h0", *common)
