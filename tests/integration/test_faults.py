"""Faults on real OpenSSH hosts: each leaves every host in a known state and says what happened."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specctl.hosts.ssh import ssh_transport
from specctl.hosts.ssh_destination import SshOptions, resolve
from tests.integration.conftest import lab_profile, reset_lab
from tests.integration.proxy import DelayProxy
from tests.integration.sshd import SshLab

PORT = 31600
NAME = "tiny-llama-demo"


@pytest.fixture
def env(lab: SshLab, tmp_path: Path) -> Iterator[dict[str, Any]]:
    yield lab_profile(lab, tmp_path, PORT)
    reset_lab(lab)


def current(lab: SshLab, host: str) -> str | None:
    link = lab.hosts[host].root / NAME / "current"
    return link.resolve().name if link.is_symlink() else None


def test_hosts_check_reports_facts(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    result = cli(
        "--json",
        "hosts",
        "--check",
        "--python",
        sys.executable,
        "--engine",
        "reference",
        "--port",
        str(PORT),
        *env["common"],
    )
    assert result.code == 0, result.stderr
    rows = {r["host"]: r for r in result.json()["hosts"]}
    assert set(rows) == {"h0", "h1", "h2"}
    for row in rows.values():
        facts = row["facts"]
        assert row["reachable"] and facts["python"] == ".".join(map(str, sys.version_info[:3]))
        assert (
            facts["engine_version"]
            and facts["port_free"] is True
            and facts["disk_free_gib"] > 0
            and facts["gpus"] == []
        )


def test_host_down_before_deploy(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    before = {h: current(lab, h) for h in ("h0", "h1")}
    lab.stop_sshd(lab.hosts["h2"])
    strict = cli("--json", "deploy", env["v1"], *env["common"])
    assert strict.code == 3
    rows = {h["host"]: h for h in strict.json()["hosts"]}
    assert "cannot connect" in rows["h2"]["detail"]
    for h in ("h0", "h1"):  # --max-failures 0: the others stop nothing (they wait for every host's proof)
        assert not rows[h]["ok"] and not rows[h]["rolled_back"] and "nothing was stopped" in rows[h]["detail"], rows
    assert {h: current(lab, h) for h in ("h0", "h1")} == before  # what they had, never stopped
    tolerant = cli("--json", "deploy", env["v1"], "--max-failures", "1", *env["common"])
    assert tolerant.code == 3
    rows = {h["host"]: h for h in tolerant.json()["hosts"]}
    assert rows["h0"]["ok"] and rows["h1"]["ok"] and not rows["h2"]["ok"], rows
    cli("stop", env["v1"], "--hosts", "h0,h1", *env["common"])


def test_port_already_in_use(cli: Any, lab: SshLab, env: dict[str, Any], ssh_options: SshOptions) -> None:
    before = current(lab, "h1")
    t = ssh_transport("h1", resolve("h1", ssh_options), ssh_options)
    root = str(lab.hosts["h1"].root)
    squatter = t.start(
        [sys.executable, "-c", f"import socket,time; s=socket.create_server(('0.0.0.0', {PORT})); time.sleep(600)"],
        cwd=root,
        log=f"{root}/squatter.log",
        pidfile=f"{root}/squatter.pid",
    )
    time.sleep(0.5)
    result = cli("--json", "deploy", env["v1"], "--hosts", "h1", *env["common"])
    t.run(["kill", "-TERM", f"-{squatter}"])
    assert result.code == 3
    [row] = result.json()["hosts"]
    assert f"port {PORT} is in use" in row["detail"]
    assert current(lab, "h1") == before  # nothing switched


def test_changed_host_key_refuses_the_deploy(cli: Any, lab: SshLab, env: dict[str, Any], tmp_path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    known = tmp_path / "known_hosts"
    known.write_text(lab.known_hosts_line(lab.hosts["h0"], (tmp_path / "other.pub").read_text().split()[1]))
    config = tmp_path / "ssh_config"
    config.write_text(lab.ssh_config.read_text().replace(str(lab.known_hosts), str(known)))
    before = current(lab, "h0")
    result = cli(
        "--json",
        "deploy",
        env["v1"],
        "--hosts",
        "h0",
        "--inventory",
        str(env["inventory"]),
        "--ssh-config",
        str(config),
        "--accept-new-host-key",
    )
    assert result.code == 3
    [row] = result.json()["hosts"]
    assert "CHANGED" in row["detail"] and row["detail"].count("SHA256:") == 2
    assert current(lab, "h0") == before


def test_a_full_disk_leaves_no_empty_file_and_is_said(
    cli: Any, lab: SshLab, env: dict[str, Any], tmp_path: Path, ssh_options: SshOptions
) -> None:
    """h2's root on a 32 MB tmpfs of its own (its sshd's mount namespace; room for `prove`'s margin),
    full at first use, full again once a release serves, then freed: each write is whole or absent
    (never the empty host-identity that read "belongs to another machine", nor the empty lock that
    stayed "unreadable"), the failure says host, path and what is free (exit 3), and once freed the
    next deploy works."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    full = tmp_path / "full"
    full.mkdir()
    t = ssh_transport("h2", resolve("h2", ssh_options), ssh_options)
    t.run(["mount", "-t", "tmpfs", "-o", "size=32m", "tmpfs", str(full)])
    fill = ["sh", "-c", 'dd if=/dev/zero of="$1/filler" bs=64k >/dev/null 2>&1; true', "sh", str(full)]
    empty = ["find", str(full), "-type", "f", "-empty"]  # read on h2: only it sees its tmpfs
    inventory = tmp_path / "hosts-full.yaml"
    inventory.write_text(Path(env["inventory"]).read_text().replace(f"root: {lab.hosts['h2'].root}", f"root: {full}"))
    deploy = ["--json", "deploy", env["v1"], "--hosts", "h2", "--baseline", "skip", "--no-verify"]
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config)]
    try:
        t.run(fill)
        first = cli(*deploy, *common)
        assert first.code == 3, first.stdout + first.stderr
        [row] = first.json()["hosts"]
        assert f"no space left on h2 at {full}/" in row["detail"] and " MB free)" in row["detail"], row["detail"]
        assert t.run(["ls", "-A", str(full)]).stdout.split() == ["filler"]  # nothing half-written
        t.run(["rm", "-f", f"{full}/filler"])
        serving = cli(*deploy, *common)
        assert serving.code == 0, serving.stdout + serving.stderr
        empties = t.run(empty).stdout.split()  # a release's own (an empty `env`)
        slack = 'head -c 12288 /dev/zero >"$1/slack"; dd if=/dev/zero of="$1/filler" bs=64k 2>/dev/null; rm "$1/slack"'
        t.run(["sh", "-c", slack, "sh", str(full)])  # 12 KiB left: the lock fits, the release does not
        unpacked = cli(*deploy, *common)  # the disk fills while the release unpacks (materialize)
        assert unpacked.code == 3, unpacked.stdout + unpacked.stderr
        [row] = unpacked.json()["hosts"]
        assert f"no space left on h2 at {full}/{NAME}/releases/" in row["detail"] and " MB free)" in row["detail"], row
        assert ".part." not in t.run(["ls", f"{full}/{NAME}/releases"]).stdout
        t.run(["rm", "-f", f"{full}/filler"])
        t.run(fill)
        later = cli(*deploy, *common)
        assert later.code == 3, later.stdout + later.stderr
        [row] = later.json()["hosts"]
        assert f"no space left on h2 at {full}/{NAME}/lock (0.0 MB free)" in row["detail"], row["detail"]
        assert t.run(empty).stdout.split() == empties and "lock" not in t.run(["ls", f"{full}/{NAME}"]).stdout.split()
        [h2] = cli("--json", "status", env["v1"], "--hosts", "h2", *common).json()["hosts"]
        assert h2["healthy"] and h2["current"] == serving.json()["hosts"][0]["release"]  # never touched
        t.run(["rm", "-f", f"{full}/filler"])
        again = cli(*deploy, *common)
        assert again.code == 0, again.stdout + again.stderr
    finally:
        cli("stop", env["v1"], "--hosts", "h2", *common)
        t.run(["umount", str(full)], check=False)


def test_one_host_under_two_inventory_names_and_one_root(
    cli: Any, lab: SshLab, env: dict[str, Any], tmp_path: Path
) -> None:
    """`a` and `b` both reach h0, with one `root:`. In one run, both once "took" the lock (its owner
    named no host), then "mv: ... Directory not empty"; across runs, the server started through `a`
    was a stranger through `b` (its mark held the name), and `current` moved past it."""
    root = lab.hosts["h0"].root
    inventory = tmp_path / "hosts-two-names.yaml"
    entries = "".join(f"  {n}:\n    ssh: h0\n    root: {root}\n    python: {sys.executable}\n" for n in ("a", "b"))
    inventory.write_text(f"apiVersion: specctl/v1\nkind: Inventory\nhosts:\n{entries}")
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config)]
    deploy = ["--json", "deploy", env["v1"], "--baseline", "skip", "--no-verify"]
    try:
        both = cli(*deploy, "--hosts", "a,b", *common)
        assert both.code == 3 and "Directory not empty" not in both.stdout + both.stderr, both.stdout + both.stderr
        rows = {r["host"]: r for r in both.json()["hosts"]}
        refused = [  # the other row says its host stopped nothing because of this one (the fleet's proof gate)
            h for h, r in rows.items() if f"{h}: the state root" in (r.get("detail") or "")[: len(h) + 20]
        ]
        assert len(refused) == 1 and "one machine under two inventory names" in rows[refused[0]]["detail"], rows
        first = cli(*deploy, "--hosts", "a", *common)
        assert first.code == 0, first.stdout + first.stderr
        serving = first.json()["hosts"][0]["release"]
        [b] = cli("--json", "status", env["v1"], "--hosts", "b", *common).json()["hosts"]
        assert b["running"] and b["healthy"] and b["current"] == serving and b["strangers"] == [], b
        second = cli(*deploy, "--hosts", "b", *common)
        assert second.code == 0, second.stdout + second.stderr
        assert "reaches the state root" in " ".join((second.stdout + second.stderr).split())
        [a] = cli("--json", "status", env["v1"], "--hosts", "a", *common).json()["hosts"]
        assert a["healthy"] and a["current"] == second.json()["hosts"][0]["release"]
        assert [s["release"] for s in a["servers"]] == [a["current"]], a  # the first server stopped, through b
    finally:
        cli("stop", env["v1"], "--hosts", "a", *common)


def test_sshd_killed_in_the_middle_of_a_deploy(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    common = [*env["common"], "--hosts", "h1"]
    assert cli("deploy", env["v1"], *common).code == 0
    before = current(lab, "h1")
    results: list[Any] = []
    worker = threading.Thread(target=lambda: results.append(cli("--json", "deploy", env["v1"], *common)))
    worker.start()
    releases = lab.hosts["h1"].root / NAME / "releases"
    deadline = time.monotonic() + 30
    while len(list(releases.iterdir())) < 2:  # the new release directory is being written
        assert time.monotonic() < deadline
        time.sleep(0.02)
    lab.kill_sshd(lab.hosts["h1"])
    worker.join(timeout=120)
    [result] = results
    assert result.code == 3
    assert not result.json()["hosts"][0]["ok"]
    assert current(lab, "h1") in (before, *[p.name for p in releases.iterdir()])  # never without a current
    lab.start_sshd(lab.hosts["h1"])
    again = cli("--json", "deploy", env["v1"], *common)  # the next deploy works, whatever was left running
    assert again.code == 0, again.stdout + again.stderr
    assert cli("--json", "status", env["v1"], *common).json()["hosts"][0]["healthy"]
    cli("stop", env["v1"], *common)


def test_latency_and_packet_loss_on_one_host(cli: Any, lab: SshLab, env: dict[str, Any], tmp_path: Path) -> None:
    h2 = lab.hosts["h2"]
    proxy = DelayProxy((h2.address, h2.port), 0.2)  # 200 ms each way in front of its sshd
    assert h2.namespace is not None
    rules = [
        "nft add table inet specctl",
        "nft add chain inet specctl input { type filter hook input priority 0 ; }",
        "nft add rule inet specctl input numgen random mod 100 < 5 drop",
    ]  # 5 % of packets into the host
    for rule in rules:
        subprocess.run(["ip", "netns", "exec", h2.namespace, *rule.split()], check=True)
    try:
        config = tmp_path / "ssh_config"
        config.write_text(
            lab.ssh_config.read_text().replace(
                f"HostName {h2.address}\n  Port {h2.port}", f"HostName 127.0.0.1\n  Port {proxy.port}"
            )
        )
        known = lab.known_hosts.read_text()
        (tmp_path / "known").write_text(known + f"[127.0.0.1]:{proxy.port} ssh-ed25519 {h2.host_key_pub}\n")
        config.write_text(config.read_text().replace(str(lab.known_hosts), str(tmp_path / "known")))
        start = time.monotonic()
        inventory = tmp_path / "hosts-slow.yaml"  # SSH through the proxy; HTTP straight to the host
        inventory.write_text(
            Path(env["inventory"]).read_text().replace("  h2:\n", f"  h2:\n    address: {h2.address}\n")
        )
        result = cli(
            "--json", "deploy", env["v1"], "--hosts", "h2", "--inventory", str(inventory), "--ssh-config", str(config)
        )
        assert result.code == 0, result.stdout + result.stderr
        assert time.monotonic() - start > 2  # the latency was really there
    finally:
        proxy.close()
        subprocess.run(["ip", "netns", "exec", h2.namespace, "nft", "delete", "table", "inet", "specctl"], check=False)
    cli("stop", env["v1"], "--hosts", "h2", *env["common"])


def test_a_release_that_cannot_start_stops_nothing(
    cli: Any, lab: SshLab, env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """With a verified release serving on h0: a missing engine.python fails preflight, an unset secret
    fails prove, an engine.host not of the host or not resolving fails preflight saying which; each
    exit 3, nothing stopped, the serving server's pid unchanged."""
    from tests.fakes.inputs import write_profile

    first = cli("--json", "deploy", env["v1"], "--hosts", "h0", *env["common"])
    assert first.code == 0, first.stdout + first.stderr
    good = first.json()["hosts"][0]["release"]
    pid_file = lab.hosts["h0"].root / NAME / "releases" / good / "server.pid"
    pid = int(pid_file.read_text())
    monkeypatch.delenv("SPECCTL_LAB_UNSET_SECRET", raising=False)
    tmp = env["tmp"]
    cases = {
        "host-python": write_profile(tmp / "v3.yaml", env["v1"], 3, engine={"python": "/nonexistent/bin/python3"}),
        "secret: SPECCTL_LAB_UNSET_SECRET": write_profile(
            tmp / "v4.yaml", env["v1"], 4, secrets=["SPECCTL_LAB_UNSET_SECRET"]
        ),
        # before: any bind error read "port N is in use ... by something other than" the profile's servers
        "engine.host 203.0.113.7 is not an address of this host": write_profile(
            tmp / "v5.yaml", env["v1"], 5, engine={"host": "203.0.113.7"}
        ),
        "engine.host no-such-host.invalid does not resolve on this host": write_profile(
            tmp / "v6.yaml", env["v1"], 6, engine={"host": "no-such-host.invalid"}
        ),
    }
    for said, profile in cases.items():
        result = cli("--json", "deploy", str(profile), "--hosts", "h0", "--skip-check", *env["common"])
        assert result.code == 3, result.stdout + result.stderr
        [row] = result.json()["hosts"]
        assert said in row["detail"] and "nothing was stopped" in result.stdout + result.stderr, row
        assert int(pid_file.read_text()) == pid and current(lab, "h0") == good
        os.kill(pid, 0)  # the same server, never stopped
    cli("stop", env["v1"], "--hosts", "h0", *env["common"])
