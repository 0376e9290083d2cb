"""Deploys through a real Slurm cluster (tests/integration/slurm.py: slurmctld and two slurmd nodes,
each in a network namespace of its own): the tiny models on the reference engine, submitted with
sbatch from specctl's own job script, followed in squeue, verified at the node the scheduler chose.

v1 is verified; v2 (wrong layers) fails verify while v1's job keeps serving and is current again;
a job that fails to start and a job that cannot be placed (its only free node drained) are
cancelled while the old job serves on; rollback resubmits a stored release; two nodes run one
two-rank server.
"""

from __future__ import annotations

import os
import re
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.engines.reference.roofline import ENV as ROOFLINE_ENV
from specctl.flows.demo import write_inputs
from specctl.hosts import _ssh_runner
from specctl.plan.sbatch import job_name
from specctl.release import readiness
from tests.integration.slurm import SlurmLab
from tests.integration.sshd import SshLab

PORT = 31950  # in each node's own network namespace


def cluster_inventory(path: Path, slurm: SlurmLab, **extra: Any) -> Path:
    cluster = {
        "kind": "slurm",
        "login": "local",
        "root": str(slurm.shared_dir / "specctl"),
        "gres": "gpu:2",
        "python": sys.executable,
        "env": {"SLURM_CONF": str(slurm.conf_path)},
        **extra,
    }
    path.write_text(yaml.safe_dump({"apiVersion": "specctl/v1", "kind": "Inventory", "clusters": {"lab": cluster}}))
    return path


def login_inventory(path: Path, slurm: SlurmLab, lab: SshLab, root: str, **extra: Any) -> Path:
    """The lab's SSH hosts, and the cluster entry with h0 as its login node (the cluster's commands
    and their SLURM_CONF travel over SSH)."""
    lab.inventory(path, sys.executable)
    data = yaml.safe_load(path.read_text())
    data["clusters"] = {
        "lab": {
            "kind": "slurm",
            "login": "h0",
            "root": str(slurm.shared_dir / root),
            "gres": "gpu:2",
            "python": sys.executable,
            "env": {"SLURM_CONF": str(slurm.conf_path)},
            **extra,
        }
    }
    path.write_text(yaml.safe_dump(data))
    return path


ROOFLINE = "floor_ms=25,knee_tokens=32,token_ms=0.5"


def on_cluster(profile: Path, name: str, **changes: Any) -> None:
    """Point a demo profile at the cluster; its server listens on every address of its node."""
    data = yaml.safe_load(profile.read_text())
    data["metadata"]["name"] = name
    data["hosts"] = ["lab"]
    if "engine" in data:
        data["engine"]["host"] = "0.0.0.0"
    for key, value in changes.items():
        data.setdefault(key, {}).update(value)
    profile.write_text(yaml.safe_dump(data, sort_keys=False))


def jobs(slurm: SlurmLab, profile: str) -> dict[str, str]:
    """run id -> job state, for the profile's jobs squeue lists (COMPLETING ones are gone: Slurm cleans up)."""
    out = slurm.run(
        "squeue", "-h", "-t", "PENDING,RUNNING,CONFIGURING,SUSPENDED", "-o", "%j %T", check=True
    ).stdout.split("\n")
    prefix = job_name(profile, "")
    return {
        name.removeprefix(prefix): state
        for name, state in (line.split() for line in out if line.strip())
        if name.startswith(prefix)
    }


@pytest.fixture
def scenario(tmp_path: Path, slurm: SlurmLab) -> tuple[Path, Path, list[str]]:
    v1, v2 = write_inputs(tmp_path, PORT, gates=True)
    on_cluster(v1, "slurm-demo")
    on_cluster(v2, "slurm-demo")
    inventory = cluster_inventory(tmp_path / "hosts.yaml", slurm)
    return v1, v2, ["--inventory", str(inventory), "--ledger", str(tmp_path / "ledger.db")]


def test_v1_verified_v2_refused_while_v1_serves_on_then_rollback(
    cli: Any, slurm: SlurmLab, scenario: tuple[Path, Path, list[str]]
) -> None:
    v1, v2, common = scenario
    on_cluster(v1, "slurm-demo", verify={"min_speedup": 0.5})
    first = cli("--json", "deploy", str(v1), *common)  # with a baseline: a job of its own beside v1's, then cancelled
    assert first.code == 0, first.stdout + first.stderr
    [host] = first.json()["hosts"]
    assert host["verdict"]["passed"] and host["verdict"]["baseline_run"], host
    assert host["verdict"]["summary"]["speedup"]["estimate"] > 0
    run1 = host["release"]
    assert jobs(slurm, "slurm-demo") == {run1: "RUNNING"} and jobs(slurm, "slurm-demo-baseline") == {}
    shown = cli("--json", "show", run1, "--ledger", common[3]).json()
    facts = shown["host_records"][0]["facts"]
    assert (
        facts["disk_free_gib"] and facts["python"] and facts["host"] == "lab"
    )  # gathered in the allocation, by the job
    release = slurm.shared_dir / "specctl" / "slurm-demo" / "releases" / run1
    assert (release / "allocation-facts.txt").read_text().startswith("disk_free_kib=")
    status = cli("--json", "status", str(v1), *common[:2]).json()["hosts"][0]
    assert status["current"] == run1 and status["healthy"] and status["servers"][0]["job"]
    assert status["servers"][0]["job_state"].startswith("RUNNING, ") and "left" in status["servers"][0]["job_state"]

    second = cli("--json", "deploy", str(v2), "--skip-check", "--baseline", "skip", *common)
    assert second.code == 4, second.stdout + second.stderr
    [host2] = second.json()["hosts"]
    assert not host2["verdict"]["passed"] and host2["rolled_back_to"] == run1
    assert jobs(slurm, "slurm-demo") == {run1: "RUNNING"}  # v2's job cancelled; v1's never stopped
    assert cli("--json", "status", str(v1), *common[:2]).json()["hosts"][0]["current"] == run1

    logs = cli("logs", str(v1), *common[:2])
    assert "fired up and ready to roll" in logs.stdout

    # `current`'s job cancelled behind specctl's back: the only verified release is `current`, not serving,
    # and rollback picks it (a release is skipped only when its server is seen running)
    slurm.run("scancel", str(status["servers"][0]["job"]), check=True)
    deadline = time.monotonic() + 60
    while jobs(slurm, "slurm-demo"):
        assert time.monotonic() < deadline, jobs(slurm, "slurm-demo")
        time.sleep(0.5)
    back = cli("--json", "rollback", str(v1), *common)  # its job is gone: resubmitted from its own files
    assert back.code == 0, back.stdout + back.stderr
    assert back.json()["hosts"][0]["release"] == run1
    assert list(jobs(slurm, "slurm-demo")) == [run1]
    stopped = cli("stop", str(v1), *common[:2])
    assert stopped.code == 0 and jobs(slurm, "slurm-demo") == {}


def test_a_job_that_cannot_start_or_be_placed_is_cancelled_and_the_old_one_serves(
    cli: Any, slurm: SlurmLab, scenario: tuple[Path, Path, list[str]], tmp_path: Path
) -> None:
    v1, _, common = scenario
    first = cli("--json", "deploy", str(v1), "--baseline", "skip", *common)
    assert first.code == 0, first.stdout + first.stderr
    run1 = first.json()["hosts"][0]["release"]

    broken = tmp_path / "profiles" / "tiny-llama-v3.yaml"  # the server refuses its environment at start-up
    broken.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": "tiny-llama-v1.yaml",
                "metadata": {"name": "slurm-demo", "version": 3},
                "engine": {"env": {"SPECCTL_REFERENCE_ROOFLINE": "nonsense"}},
            }
        )
    )
    failed = cli("--json", "deploy", str(broken), "--baseline", "skip", *common)
    assert failed.code != 0
    [host] = failed.json()["hosts"]
    assert "ended" in host["detail"] and "SPECCTL_REFERENCE_ROOFLINE" in "\n".join(host["log_tail"]), host
    assert jobs(slurm, "slurm-demo") == {run1: "RUNNING"}

    # more GPUs than a node has: `sbatch --test-only` refuses it in the prove step, nothing is submitted
    greedy = cluster_inventory(tmp_path / "greedy.yaml", slurm, gres="gpu:9")
    refused = cli("--json", "deploy", str(v1), "--baseline", "skip", "--inventory", str(greedy), *common[2:])
    assert refused.code == 3, refused.stdout + refused.stderr
    [host] = refused.json()["hosts"]
    assert "not proven" in host["detail"] and "sbatch --test-only refused the job" in host["detail"], host
    assert jobs(slurm, "slurm-demo") == {run1: "RUNNING"}
    # the dry run asks the same question of the real scheduler: the job a deploy would stop at, exit 3
    dry = cli("--json", "deploy", str(v1), "--dry-run", "--inventory", str(greedy), *common[2:])
    assert dry.code == 3, dry.stdout + dry.stderr
    [row] = dry.json()["dry_run"]
    [problem] = row["prove"]["problems"]
    assert problem["check"] == "start" and "sbatch --test-only refused the job" in problem["message"], row["prove"]
    assert jobs(slurm, "slurm-demo") == {run1: "RUNNING"}

    free = next(n for n in slurm.nodes if n != slurm.run("squeue", "-h", "-o", "%N", check=True).stdout.strip())
    slurm.drain(free, "specctl test: drained")
    try:
        queued = cli("--json", "deploy", str(v1), "--baseline", "skip", "--startup-timeout", "12", *common)
        assert queued.code != 0
        [host] = queued.json()["hosts"]
        assert "start-up budget" in host["detail"] and "pending" in host["detail"], host
        assert jobs(slurm, "slurm-demo") == {run1: "RUNNING"}
    finally:
        slurm.resume(free)
    assert cli("--json", "status", str(v1), *common[:2]).json()["hosts"][0]["current"] == run1


def test_two_nodes_serve_one_two_rank_server(cli: Any, slurm: SlurmLab, tmp_path: Path, monkeypatch: Any) -> None:
    """...and each rank gets the profile's secret, fed to its own node's step."""
    v1, _ = write_inputs(tmp_path, PORT + 1, gates=True)
    on_cluster(v1, "slurm-two", parallel={"tp": 1, "nnodes": 2, "dist_init_port": PORT + 2})
    with_secret(v1, monkeypatch)
    common = [
        "--inventory",
        str(cluster_inventory(tmp_path / "hosts.yaml", slurm)),
        "--ledger",
        str(tmp_path / "ledger.db"),
    ]
    # tp 1 over 2 nodes is a check error (the reference engine runs tp 1 only): fine for the rehearsal of the ranks
    done = cli("--json", "deploy", str(v1), "--baseline", "skip", "--skip-check", *common)
    assert done.code == 0, done.stdout + done.stderr
    [host] = done.json()["hosts"]
    assert host["verdict"]["passed"]
    [(run_id, state)] = jobs(slurm, "slurm-two").items()
    assert state == "RUNNING"
    nodes = slurm.run("squeue", "-h", "-o", "%N", check=True).stdout.strip()
    assert slurm.hostnames(nodes) == ["sn0", "sn1"]
    release = slurm.shared_dir / "specctl" / "slurm-two" / "releases" / run_id
    assert (release / "head-address").read_text().split()[1] == slurm.node_address("sn0")
    log = (release / "server.log").read_text()
    assert "rank 1 joined" in log and "rank 0 waiting for 1 other node(s)" in log, log[-2000:]
    ranks = _servers_environments(f"SPECCTL_RELEASE_DIR={release}".encode())
    assert len(ranks) == 2 and all(f"SLURM_TEST_TOKEN={SECRET}".encode() in env.split(b"\0") for env in ranks)
    cli("stop", str(v1), *common[:2])


def test_through_a_login_node_reached_over_ssh(
    cli: Any, slurm: SlurmLab, lab: SshLab, tmp_path: Path, monkeypatch: Any
) -> None:
    """The login node is an SSH host (the cluster's commands and their SLURM_CONF travel over SSH);
    the dry run shows the job script without submitting anything."""
    if not lab.use_namespaces:
        pytest.skip("the login node must be a host of its own")
    v1, _ = write_inputs(tmp_path, PORT + 3, gates=True)
    on_cluster(v1, "slurm-ssh")
    with_secret(v1, monkeypatch)  # fed over the SSH connection to the login node
    inventory = login_inventory(tmp_path / "hosts.yaml", slurm, lab, "specctl-ssh")
    common = [
        "--inventory",
        str(inventory),
        "--ssh-config",
        str(lab.ssh_config),
        "--ledger",
        str(tmp_path / "ledger.db"),
    ]
    dry = cli("deploy", str(v1), "--dry-run", *common)
    assert dry.code == 0, dry.stdout + dry.stderr
    assert "prove ok on lab" in dry.stdout.splitlines(), dry.stdout  # sbatch --test-only took the job, over SSH
    [row] = cli("--json", "deploy", str(v1), "--dry-run", *common).json()["dry_run"]
    assert row["prove"] == {"ok": True, "problems": []}, row["prove"]
    assert row["job"][:4] == ["sbatch", "--job-name=specctl:slurm-ssh:<run-id>", "--nodes=1", "--ntasks-per-node=1"]
    assert "--gres=gpu:2" in row["job"]
    # the sbatch command under the dry run's table, broken before its options where it is long
    assert re.search(
        r"\nSlurm job on [^\n]+:\n  sbatch( \\\n   )? '--job-name=specctl:slurm-ssh:<run-id>'( \\\n   )? --nodes=1",
        dry.stdout,
    ), dry.stdout
    assert jobs(slurm, "slurm-ssh") == {}
    done = cli("--json", "deploy", str(v1), "--baseline", "skip", *common)
    assert done.code == 0, done.stdout + done.stderr
    [run_id] = jobs(slurm, "slurm-ssh")
    assert done.json()["hosts"][0]["release"] == run_id
    release = slurm.shared_dir / "specctl-ssh" / "slurm-ssh" / "releases" / run_id
    [env] = _servers_environments(f"SPECCTL_RELEASE_DIR={release}".encode())
    assert f"SLURM_TEST_TOKEN={SECRET}".encode() in env.split(b"\0")
    assert cli("stop", str(v1), *common[:4]).code == 0 and jobs(slurm, "slurm-ssh") == {}


def _when_running(slurm: SlurmLab, profile: str, run_not: str, act: Callable[[str], None]) -> threading.Thread:
    """In the background: once a job of the profile other than `run_not`'s runs, `act` on its node."""

    def watch() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            for line in slurm.run("squeue", "-h", "-t", "RUNNING", "-o", "%j %N").stdout.splitlines():
                name, node = line.split()
                if name.startswith(job_name(profile, "")) and not name.endswith(run_not):
                    act(node)
                    return
            time.sleep(0.1)

    thread = threading.Thread(target=watch, daemon=True)
    thread.start()
    return thread


def test_a_node_drained_mid_start_finishes_the_start_and_one_that_fails_cancels_it(
    cli: Any, slurm: SlurmLab, tmp_path: Path
) -> None:
    """Drain lets a running job finish (Slurm's meaning), so that deploy succeeds; a node that goes
    down under a starting job ends it, and the deploy fails while the old job serves on."""
    v1, _ = write_inputs(tmp_path, PORT + 4, gates=True)
    on_cluster(v1, "slurm-nodes")
    inventory = cluster_inventory(
        tmp_path / "hosts.yaml", slurm, setup=["sleep 3"]
    )  # a slow start: time to act on the node
    common = ["--inventory", str(inventory), "--ledger", str(tmp_path / "ledger.db")]
    first = cli("--json", "deploy", str(v1), "--baseline", "skip", *common)
    assert first.code == 0, first.stdout + first.stderr
    run1 = first.json()["hosts"][0]["release"]

    watcher = _when_running(
        slurm, "slurm-nodes", run1, lambda node: slurm.drain(node, "specctl test: drained mid-start")
    )
    second = cli("--json", "deploy", str(v1), "--baseline", "skip", *common)
    watcher.join()
    assert second.code == 0, second.stdout + second.stderr
    run2 = second.json()["hosts"][0]["release"]
    assert jobs(slurm, "slurm-nodes") == {
        run2: "RUNNING"
    }  # the new job ran to ready on its draining node; run1's cancelled
    [drained] = [node for node, state in slurm.node_states().items() if "drain" in state]
    slurm.resume(drained)

    def down(node: str) -> None:
        slurm.run(
            "scontrol", "update", f"NodeName={node}", "State=DOWN", "Reason=specctl test: failed mid-start", check=True
        )

    watcher = _when_running(slurm, "slurm-nodes", run2, down)
    third = cli("--json", "deploy", str(v1), "--baseline", "skip", "--startup-timeout", "10", *common)
    watcher.join()
    assert third.code != 0, third.stdout
    detail = third.json()["hosts"][0]["detail"]
    assert "ended: NODE_FAIL" in detail or "pending" in detail, detail  # ended, or requeued with nowhere to run
    assert jobs(slurm, "slurm-nodes") == {run2: "RUNNING"}
    assert cli("--json", "status", str(v1), *common[:2]).json()["hosts"][0]["current"] == run2


def test_tune_refuses_a_cluster_before_submitting_anything(
    cli: Any, slurm: SlurmLab, scenario: tuple[Path, Path, list[str]]
) -> None:
    v1, _, common = scenario
    result = cli("tune", str(v1), "--host", "lab", *common)
    assert result.code == 2 and "is a Slurm cluster" in result.stderr, result.stdout + result.stderr
    assert jobs(slurm, "slurm-demo") == {}


def test_two_roots_on_one_cluster_never_touch_each_others_jobs(cli: Any, slurm: SlurmLab, tmp_path: Path) -> None:
    """Staging and production of one profile on one cluster: the jobs' names agree, their release
    directories (squeue's %Z) do not, and that is what each entry goes by."""
    v1, _ = write_inputs(tmp_path, PORT + 5, gates=True)
    on_cluster(v1, "slurm-roots")
    entry = {
        "kind": "slurm",
        "login": "local",
        "gres": "gpu:2",
        "python": sys.executable,
        "env": {"SLURM_CONF": str(slurm.conf_path)},
    }
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Inventory",
                "clusters": {
                    "staging": {**entry, "root": str(slurm.shared_dir / "staging")},
                    # squeue's %Z is read last: a "|" in a root hides none of its jobs
                    "prod": {**entry, "root": str(slurm.shared_dir / "prod|b")},
                },
            }
        )
    )
    common = ["--inventory", str(inventory), "--ledger", str(tmp_path / "ledger.db")]
    for entry_name in ("staging", "prod"):
        done = cli("--json", "deploy", str(v1), "--hosts", entry_name, "--baseline", "skip", *common)
        assert done.code == 0, done.stdout + done.stderr
    assert len(jobs(slurm, "slurm-roots")) == 2
    status = {
        h["host"]: h for h in cli("--json", "status", str(v1), "--hosts", "staging,prod", *common[:2]).json()["hosts"]
    }
    assert all(len(h["servers"]) == 1 and h["healthy"] is not None for h in status.values()), status
    assert cli("stop", str(v1), "--hosts", "staging", *common[:2]).code == 0
    [(run_id, state)] = jobs(slurm, "slurm-roots").items()
    assert state == "RUNNING" and (slurm.shared_dir / "prod|b" / "slurm-roots" / "releases" / run_id).is_dir()
    again = cli("--json", "deploy", str(v1), "--hosts", "prod", "--baseline", "skip", "--no-verify", *common)
    assert again.code == 0, again.stdout + again.stderr
    assert list(jobs(slurm, "slurm-roots")) == [again.json()["hosts"][0]["release"]]  # the first job retired
    assert cli("stop", str(v1), "--hosts", "prod", *common[:2]).code == 0
    assert jobs(slurm, "slurm-roots") == {}


def test_compute_nodes_only_the_login_node_reaches_are_served_through_a_tunnel(
    cli: Any, slurm: SlurmLab, lab: SshLab, tmp_path: Path
) -> None:
    """This machine may not open the servers' port on the compute nodes (an nftables rule on its own
    output; the login node's traffic is forwarded, not output, so it still gets through): with
    `tunnel: true`, readiness, verify and status go through the login node's SSH connection."""
    if not lab.use_namespaces:
        pytest.skip("the login node must be a host of its own")
    port = PORT + 6
    table = f"specctl_tunnel_{os.getpid()}"
    nodes = ", ".join(node.address for node in slurm.nodes.values())
    subprocess.run(
        ["nft", "-f", "-"],
        check=True,
        input=(
            f"table inet {table} {{\n chain out {{\n  type filter hook output priority 0;\n"
            f"  ip daddr {{ {nodes} }} tcp dport {port} reject\n }}\n}}\n"
        ).encode(),
    )
    try:
        v1, _ = write_inputs(tmp_path, port, gates=True)
        on_cluster(v1, "slurm-tunnel")
        inventory = login_inventory(tmp_path / "hosts.yaml", slurm, lab, "specctl-tunnel", tunnel=True)
        common = [
            "--inventory",
            str(inventory),
            "--ssh-config",
            str(lab.ssh_config),
            "--ledger",
            str(tmp_path / "ledger.db"),
        ]
        done = cli("--json", "deploy", str(v1), "--baseline", "skip", *common)
        assert done.code == 0, done.stdout + done.stderr
        assert done.json()["hosts"][0]["verdict"]["passed"]
        [run_id] = jobs(slurm, "slurm-tunnel")
        head = (
            (slurm.shared_dir / "specctl-tunnel" / "slurm-tunnel" / "releases" / run_id / "head-address")
            .read_text()
            .split()[1]
        )
        with pytest.raises(OSError):  # the rule holds: only the tunnel reached it
            socket.create_connection((head, port), timeout=2).close()
        assert cli("--json", "status", str(v1), *common[:4]).json()["hosts"][0]["healthy"]
        cli("stop", str(v1), *common[:4])
    finally:
        subprocess.run(["nft", "delete", "table", "inet", table], check=False)


def test_status_says_when_the_time_limit_stops_serving_and_explains_the_job_it_ended(
    cli: Any, slurm: SlurmLab, tmp_path: Path
) -> None:
    """A job with 10 minutes left is flagged with when serving stops; its limit cut to nothing left (slurmctld
    checks time limits every 30 s), it ends as TIMEOUT, and status explains the ended job from `scontrol`."""
    v1, _ = write_inputs(tmp_path, PORT + 7, gates=True)
    on_cluster(v1, "slurm-limit")
    inventory = cluster_inventory(tmp_path / "hosts.yaml", slurm, time="1")
    common = ["--inventory", str(inventory), "--ledger", str(tmp_path / "ledger.db")]
    done = cli("deploy", str(v1), "--baseline", "skip", "--no-verify", *common)
    assert done.code == 0, done.stdout + done.stderr
    said = " ".join(done.stdout.split())  # the recap: a 1-minute limit is said with when serving stops
    assert re.search(r"lab: job \d+: time limit 1:00, serving stops at \S+Z", said), said
    status = cli("--json", "status", str(v1), *common[:2]).json()["hosts"][0]
    run_id = status["current"]
    note = status["servers"][0]["job_state"]
    assert "TIME LIMIT NEAR: serving stops at " in note and note.endswith("Z (time limit)"), note
    job = str(status["servers"][0]["job"])

    # 0: Slurm moves the job's end to now (1 minute would wait out what is left of the job's first minute),
    # and its next time-limit check, within 30 s, ends it as TIMEOUT
    slurm.run("scontrol", "update", f"JobId={job}", "TimeLimit=0", check=True)
    assert slurm.wait_job(job, timeout=120)["JobState"] == "TIMEOUT"
    status = cli("--json", "status", str(v1), *common[:2]).json()["hosts"][0]
    assert status["current"] == run_id and not status["running"], status
    assert status["ended"].startswith(f"job {job} ended at "), status
    assert "TIMEOUT (its time limit was reached; reason TimeLimit" in status["ended"], status
    assert "not running: job " in cli("status", str(v1), *common[:2]).stdout


SECRET = "hf_slurm-s3cr3t-planted-by-the-test-7731"


def with_secret(profile: Path, monkeypatch: Any) -> None:
    """The profile lists SLURM_TEST_TOKEN under its secrets, and specctl's environment holds it."""
    data = yaml.safe_load(profile.read_text())
    data["secrets"] = ["SLURM_TEST_TOKEN"]
    profile.write_text(yaml.safe_dump(data, sort_keys=False))
    monkeypatch.setenv("SLURM_TEST_TOKEN", SECRET)


def _servers_environments(marker: bytes) -> list[bytes]:
    """The environment of every server (the reference engine) on this machine, the lab's nodes'
    included, whose environment holds `marker`."""
    found = []
    for proc in Path("/proc").glob("[0-9]*"):
        try:
            env, argv = (proc / "environ").read_bytes(), (proc / "cmdline").read_bytes()
        except OSError:
            continue
        if marker in env.split(b"\0") and b"specctl.engines.reference" in argv:
            found.append(env)
    return found


def test_secrets_reach_the_server_and_no_file_nor_the_controller(
    cli: Any, slurm: SlurmLab, tmp_path: Path, monkeypatch: Any
) -> None:
    """The secret is fed to the running job's step over specctl's connection: not in sbatch's
    environment (which the controller keeps in its state files), the job script, `scontrol show job`,
    the release directory or any file of the cluster."""
    v1, _ = write_inputs(tmp_path, PORT + 8, gates=True)
    on_cluster(v1, "slurm-secret")
    with_secret(v1, monkeypatch)
    common = ["--inventory", str(cluster_inventory(tmp_path / "hosts.yaml", slurm)), "--ledger", str(tmp_path / "l.db")]
    done = cli("--json", "deploy", str(v1), "--baseline", "skip", "--no-verify", *common)
    assert done.code == 0, done.stdout + done.stderr
    [(run_id, job)] = [(r, j) for r, j in _job_ids(slurm, "slurm-secret").items()]
    release = slurm.shared_dir / "specctl" / "slurm-secret" / "releases" / run_id
    servers = _servers_environments(f"SPECCTL_RELEASE_DIR={release}".encode())
    assert servers and all(f"SLURM_TEST_TOKEN={SECRET}".encode() in env.split(b"\0") for env in servers)
    shown = slurm.run("scontrol", "show", "job", "-dd", job, check=True).stdout
    assert f"JobId={job}" in shown and SECRET not in shown
    assert "SLURM_TEST_TOKEN" in (release / "job.sbatch").read_text()  # by name only
    for path in slurm.workdir.rglob("*"):  # the controller's state, the nodes' spool, logs, every release
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), path
    assert not list(release.glob("*.fifo"))
    cli("stop", str(v1), *common[:2])


def _job_ids(slurm: SlurmLab, profile: str) -> dict[str, str]:
    """run id -> job id of the profile's running jobs."""
    out = slurm.run("squeue", "-h", "-t", "RUNNING", "-o", "%j %i", check=True).stdout.splitlines()
    prefix = job_name(profile, "")
    return {n.removeprefix(prefix): i for n, i in (line.split() for line in out) if n.startswith(prefix)}


def test_a_two_second_login_blip_during_verify_is_retried_and_the_deploy_passes(
    cli: Any, slurm: SlurmLab, lab: SshLab, tmp_path: Path
) -> None:
    """The login node's sshd and every connection it serves are killed for 2 s while the new job is
    verified through the login node (`tunnel: true`: every request rides its SSH connection)."""
    if not lab.use_namespaces:
        pytest.skip("the login node must be a host of its own")
    v1, _ = write_inputs(tmp_path, PORT + 9, gates=True)
    # each target forward takes at least 25 ms (the roofline stand-in), so verify lasts seconds however
    # fast the machine is: on an idle one it took 1.2 s without it, and the blip came after it
    on_cluster(v1, "slurm-blip", verify={"requests": 80}, engine={"env": {ROOFLINE_ENV: ROOFLINE}})
    inventory = login_inventory(tmp_path / "hosts.yaml", slurm, lab, "specctl-blip", tunnel=True)
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config), "--ledger", str(tmp_path / "l.db")]
    first = cli("--json", "deploy", str(v1), "--baseline", "skip", "--no-verify", *common)
    assert first.code == 0, first.stdout + first.stderr
    run1 = first.json()["hosts"][0]["release"]
    releases = slurm.shared_dir / "specctl-blip" / "slurm-blip" / "releases"
    out: list[Any] = []
    worker = threading.Thread(
        target=lambda: out.append(cli("--json", "deploy", str(v1), "--baseline", "skip", *common))
    )
    started = time.monotonic()
    worker.start()

    def verifying() -> bool:  # the new server is ready: verify's requests come next
        logs = [p / "server.log" for p in releases.iterdir() if p.name != run1]
        return any(log.exists() and "ready to roll" in log.read_text() for log in logs)

    while not verifying():
        assert time.monotonic() - started < 120, "the new job never became ready"
        time.sleep(0.05)
    time.sleep(1.5)  # specctl has seen it ready (it polls every 0.5 s at most) and verifies
    lab.kill_sshd(lab.hosts["h0"])
    time.sleep(2)
    lab.start_sshd(lab.hosts["h0"])
    blip_at = time.monotonic() - started
    worker.join(timeout=300)
    [result] = out
    assert result.code == 0, result.stdout + result.stderr
    [host] = result.json()["hosts"]
    assert host["verdict"]["passed"] and host["verdict"]["summary"]["wall_s"] > 4, host  # the blip was inside it
    assert jobs(slurm, "slurm-blip") == {host["release"]: "RUNNING"}
    print(f"blip at {blip_at:.1f} s of a {time.monotonic() - started:.1f} s deploy")
    cli("stop", str(v1), *common[:4])


def test_a_submission_whose_reply_is_cut_off_is_adopted_never_submitted_twice(
    cli: Any, slurm: SlurmLab, lab: SshLab, tmp_path: Path
) -> None:
    """sbatch on the login node is slow to submit the job, and its reply is cut off: sshd and its
    connections are killed while it still runs. specctl reconnects, waits until that sbatch (the pid it
    recorded before it ran) is gone, and follows the job it submitted: one job, never a second one."""
    if not lab.use_namespaces:
        pytest.skip("the login node must be a host of its own")
    held, answered = tmp_path / "sbatch-held", tmp_path / "sbatch-answered"
    wrappers = tmp_path / "bin"
    wrappers.mkdir()
    real = shutil.which("sbatch")
    (wrappers / "sbatch").write_text(  # the first call: a pause, then the real sbatch (it submits after the cut)
        f'#!/bin/sh\n[ -e {held} ] && exec {real} "$@"\ntouch {held}; sleep 8\n'
        f'{real} "$@"; rc=$?; touch {answered}; exit $rc\n'
    )
    (wrappers / "sbatch").chmod(0o755)
    v1, _ = write_inputs(tmp_path, PORT + 10, gates=True)
    on_cluster(v1, "slurm-lost")
    inventory = login_inventory(tmp_path / "hosts.yaml", slurm, lab, "specctl-lost")
    data = yaml.safe_load(inventory.read_text())
    data["clusters"]["lab"]["env"]["PATH"] = f"{wrappers}:{os.environ['PATH']}"
    inventory.write_text(yaml.safe_dump(data))
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config), "--ledger", str(tmp_path / "l.db")]
    out: list[Any] = []
    worker = threading.Thread(
        target=lambda: out.append(cli("--json", "deploy", str(v1), "--baseline", "skip", "--no-verify", *common))
    )
    worker.start()
    deadline = time.monotonic() + 60
    while not held.exists():
        assert time.monotonic() < deadline, "sbatch never ran"
        time.sleep(0.05)
    lab.kill_sshd(lab.hosts["h0"])  # the job is submitted; its id never reaches specctl
    time.sleep(1)
    lab.start_sshd(lab.hosts["h0"])
    worker.join(timeout=180)
    [result] = out
    assert result.code == 0, result.stdout + result.stderr
    run_id = result.json()["hosts"][0]["release"]
    deadline = time.monotonic() + 30  # the first sbatch has answered (specctl waited for it)
    while not answered.exists():
        assert time.monotonic() < deadline, "the first sbatch never ended"
        time.sleep(0.1)
    every = slurm.run("squeue", "-h", "-t", "all", "-o", "%i %j %k", check=True).stdout.split("\n")
    mine = [line.split() for line in every if job_name("slurm-lost", "") in line]
    assert len(mine) == 1 and mine[0][2].startswith(f"specctl:{run_id}:"), every  # one job, adopted
    release = slurm.shared_dir / "specctl-lost" / "slurm-lost" / "releases" / run_id
    assert (release / "job-id").read_text().strip() == mine[0][0]
    assert jobs(slurm, "slurm-lost") == {run_id: "RUNNING"}
    cli("stop", str(v1), *common[:4])


def test_a_login_node_lost_for_good_while_the_new_job_starts_keeps_the_old_job_and_says_so(
    cli: Any, slurm: SlurmLab, lab: SshLab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The login node goes away for good once the new job runs (its start is slow): readiness counts
    the lost connection after LOGIN_BLIP_BUDGET_S, the new job cannot be cancelled nor `current`
    switched; the deploy says that the new job cancels itself, unconfirmed, and that the old one,
    never stopped, keeps serving."""
    if not lab.use_namespaces:
        pytest.skip("the login node must be a host of its own")
    # the connection never comes back: readiness's budget for a lost connection (30 s) and the pauses
    # between attempts to connect (0.5, 1, 2 s: 3.5 s for each command sent) shortened, as all is waiting
    monkeypatch.setattr(readiness, "LOGIN_BLIP_BUDGET_S", 10.0)
    monkeypatch.setattr(_ssh_runner, "BACKOFF_S", 0.1)
    v1, _ = write_inputs(tmp_path, PORT + 11, gates=True)
    on_cluster(v1, "slurm-gone")
    inventory = login_inventory(tmp_path / "hosts.yaml", slurm, lab, "specctl-gone", setup=["sleep 3"])
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config), "--ledger", str(tmp_path / "l.db")]
    first = cli("--json", "deploy", str(v1), "--baseline", "skip", "--no-verify", *common)
    assert first.code == 0, first.stdout + first.stderr
    run1 = first.json()["hosts"][0]["release"]
    watcher = _when_running(slurm, "slurm-gone", run1, lambda node: lab.kill_sshd(lab.hosts["h0"]))
    try:
        result = cli("--json", "deploy", str(v1), "--baseline", "skip", "--no-verify", *common)
        watcher.join()
        assert result.code != 0, result.stdout
        [host] = result.json()["hosts"]
        [run2] = [r for r in jobs(slurm, "slurm-gone") if r != run1]
        assert f"job of release {run2}" not in host["detail"]
        assert f"of release {run2} could not be cancelled: it cancels itself" in host["detail"], host
        assert "the job that served before was never stopped: it keeps serving" in host["detail"], host
        assert jobs(slurm, "slurm-gone") == {run1: "RUNNING", run2: "RUNNING"}
        current = slurm.shared_dir / "specctl-gone" / "slurm-gone" / "current"
        assert os.readlink(current).endswith(run1)
    finally:
        lab.start_sshd(lab.hosts["h0"])
    cli("stop", str(v1), *common[:4])


def test_watch_reads_a_jobs_metrics_and_probes_a_quiet_window(
    cli: Any, slurm: SlurmLab, scenario: tuple[Path, Path, list[str]]
) -> None:
    """watch on a cluster: the serving job found through squeue, its /metrics read at the node the
    scheduler chose; with no traffic the window is unknown, and --probe judges a probe instead."""
    v1, _, common = scenario
    first = cli("--json", "deploy", str(v1), "--baseline", "skip", *common)
    assert first.code == 0, first.stdout + first.stderr
    run1 = first.json()["hosts"][0]["release"]
    window = ["--once", "--window", "3s", "--look-every", "1s"]
    quiet = cli("--json", "watch", str(v1), *window, *common)
    assert quiet.code == 0, quiet.stdout + quiet.stderr
    [row] = quiet.json()["hosts"]
    assert row["release"] == run1 and row["state"] == "unknown" and "too little traffic" in row["verdict"]["reason"]
    probed = cli("--json", "watch", str(v1), *window, "--probe", *common)
    assert probed.code == 0, probed.stdout + probed.stderr
    [row] = probed.json()["hosts"]
    assert row["state"] == "ok" and row["window"]["method"] == "probe" and row["window"]["requests"] == 8
    assert row["verdict"]["interval"]["estimate"] > 3.0
    cli("stop", str(v1), *common[:2])
