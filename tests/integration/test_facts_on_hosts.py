"""Checkpoint facts read where the weights live: a profile whose target and drafter are paths on
the hosts' own disks (a file system each host sees alone, as a GPU host's local NVMe) is checked
from this machine, which cannot see them, by reading them on a host over SSH; a deploy reads them
on every host it deploys to and refuses, before anything is stopped, when the hosts' copies differ."""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.flows.demo import DRAFTER, MODELS, TARGET
from specctl.hosts.ssh import ssh_transport
from specctl.hosts.ssh_destination import SshOptions, resolve
from tests.integration.conftest import lab_profile
from tests.integration.sshd import SshLab

PORT = 31840
NAME = "facts-on-hosts"  # a profile name of its own: other tests' releases are not this test's "current"


@pytest.fixture
def env(lab: SshLab, tmp_path: Path) -> dict[str, Any]:
    return lab_profile(lab, tmp_path, PORT)


@contextmanager
def private_disks(lab: SshLab, names: list[str], path: str) -> Iterator[None]:
    """A tmpfs at `path` that each named host sees alone (its sshd's mount namespace); restored after."""
    hosts = [lab.hosts[n] for n in names]
    try:
        for host in hosts:
            host.tmpfs = {path: "64m"}
            lab.stop_sshd(host)
            lab.start_sshd(host)
        yield
    finally:
        for host in hosts:
            host.tmpfs = {}
            lab.stop_sshd(host)
            lab.start_sshd(host)


def put_models(lab: SshLab, host: str, models: str, *, hidden_size: int | None = None) -> None:
    """The shipped tiny models copied to `models` on the host over SSH (the target's hidden_size
    changed when asked: a different copy under the same path)."""
    options = SshOptions(config_path=str(lab.ssh_config))
    transport = ssh_transport(host, resolve(host, options), options)
    for name in (TARGET, DRAFTER):
        for file in sorted((MODELS / name).iterdir()):
            data = file.read_bytes()
            if name == TARGET and file.name == "config.json" and hidden_size is not None:
                data = json.dumps({**json.loads(data), "hidden_size": hidden_size}, indent=2).encode()
            transport.put(f"{models}/{name}/{file.name}", data)


def host_path_profile(env: dict[str, Any], models: str, *, hosts: list[str]) -> str:
    """The demo's v1 with target and drafter (and the manifest naming them) as paths on the hosts."""
    tmp = Path(env["tmp"])
    target, drafter = f"{models}/{TARGET}", f"{models}/{DRAFTER}"
    manifest = yaml.safe_load((tmp / "manifests" / "tiny-llama-eagle3.yaml").read_text())
    manifest["target"]["model"], manifest["drafter"]["model"] = target, drafter
    (tmp / "manifests" / "host-paths.yaml").write_text(yaml.safe_dump(manifest, sort_keys=False))
    data = yaml.safe_load(Path(env["v1"]).read_text())
    data["metadata"]["name"] = NAME
    data["target"]["model"] = target
    data["drafter"].update({"model": drafter, "manifest": "../manifests/host-paths.yaml"})
    data["hosts"] = hosts
    path = tmp / "profiles" / "host-paths.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return str(path)


def codes(result: Any) -> list[str]:
    return [f["code"] for f in result.json()["findings"]]


def test_check_reads_host_paths_on_the_profiles_host_or_on_a_named_one(
    cli: Any, lab: SshLab, env: dict[str, Any], tmp_path: Path
) -> None:
    disk = str(tmp_path / "nvme")
    models = f"{disk}/models"
    with private_disks(lab, ["h1", "h2"], disk):
        put_models(lab, "h1", models)
        put_models(lab, "h2", models)
        assert not Path(models).exists()  # this machine cannot see them
        profile = host_path_profile(env, models, hosts=["h1"])

        checked = cli("--json", "check", profile, *env["common"])
        assert checked.code == 0, checked.stdout + checked.stderr
        data = checked.json()
        [source] = [f for f in data["findings"] if f["code"] == "facts-source"]
        assert source["message"] == "checkpoint facts: target and drafter read on host h1 over SSH"
        assert data["facts"]["target"] == {"model": f"{models}/{TARGET}", "where": "host h1 over SSH", "hosts": ["h1"]}
        # the same checks, on the same facts, as the demo's profile read on this machine
        local = cli("--json", "check", env["v1"])
        assert local.code == 0 and [c for c in codes(checked) if c != "facts-source"] == codes(local)

        on_h2 = cli("--json", "check", profile, "--on", "h2", *env["common"])
        assert on_h2.code == 0, on_h2.stdout
        assert on_h2.json()["facts"]["drafter"]["where"] == "host h2 over SSH"
        shown = cli("check", profile, "--on", "h2", *env["common"])
        assert shown.code == 0 and "read on host h2 over SSH" in shown.stdout + shown.stderr

        nowhere = host_path_profile(env, f"{disk}/elsewhere", hosts=["h1"])
        missing = cli("--json", "check", nowhere, *env["common"])
        assert missing.code == 1
        unreadable = [f for f in missing.json()["findings"] if f["code"] == "checkpoint-unreadable"]
        assert [f["field"] for f in unreadable] == ["target.model", "drafter.model"]
        assert (
            unreadable[0]["message"]
            == f"target checkpoint: on host h1: checkpoint directory {disk}/elsewhere/{TARGET} does not exist"
        )
        assert unreadable[0]["fix"].startswith(f"copy the checkpoint to {disk}/elsewhere/{TARGET} on h1")

        on_h0 = cli("--json", "check", profile, "--on", "h0", *env["common"])  # h0 has no such disk
        assert on_h0.code == 1 and "on host h0: checkpoint directory" in on_h0.stdout


def test_deploy_refuses_hosts_whose_copies_differ_before_anything_is_stopped(
    cli: Any, lab: SshLab, env: dict[str, Any], tmp_path: Path
) -> None:
    disk = str(tmp_path / "nvme")
    models = f"{disk}/models"
    common = [*env["common"], "--hosts", "h0,h1"]
    with private_disks(lab, ["h0", "h1"], disk):
        put_models(lab, "h0", models)
        put_models(lab, "h1", models, hidden_size=256)
        profile = host_path_profile(env, models, hosts=["all"])
        try:
            running = Path(env["tmp"]) / "profiles" / "running.yaml"  # the same profile from paths this machine has too
            data = yaml.safe_load(Path(env["v1"]).read_text())
            data["metadata"]["name"] = NAME
            running.write_text(yaml.safe_dump(data, sort_keys=False))
            assert (
                cli("deploy", str(running), "--no-verify", *common).code == 0
            )  # something runs that must keep running
            before = [h["current"] for h in cli("--json", "status", profile, *common).json()["hosts"]]
            refused = cli("--json", "deploy", profile, "--no-verify", *common)
            assert refused.code == 2, refused.stdout + refused.stderr
            error = refused.json()["error"]
            assert "h0 vs h1" in error["message"] and "hidden_size: 128 on h0, 256 on h1" in error["message"], error
            assert "nothing was stopped" in error["fix"]
            status = cli("--json", "status", profile, *common).json()["hosts"]
            assert [h["current"] for h in status] == before and all(before) and all(h["healthy"] for h in status)
            assert len(cli("--json", "runs").json()["runs"]) == 1  # the refused deploy recorded no run

            put_models(lab, "h1", models)  # the same copy on both: read on each, compared, deployed
            deployed = cli("--json", "deploy", profile, "--no-verify", *common)
            assert deployed.code == 0, deployed.stdout + deployed.stderr
            assert all(h["ok"] for h in deployed.json()["hosts"])
        finally:
            cli("stop", profile, *common)
