"""The Slurm lab itself, through Slurm's real commands: multi-node steps, a job's server reached at
its node's address, drained nodes, final job states (scontrol and sacct's job-completion file), GPUs."""

from __future__ import annotations

import socket
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.integration.slurm import SlurmLab

PORT = 31900  # in sn0's own network namespace


def _get(url: str) -> str:
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(url, timeout=2) as response:
        return str(response.read().decode())


def _port_open(address: str, port: int) -> bool:
    try:
        with socket.create_connection((address, port), timeout=1):
            return True
    except OSError:
        return False


def test_cluster_up_with_node_addresses(slurm: SlurmLab) -> None:
    assert slurm.node_states() == {"sn0": "idle", "sn1": "idle"}
    for name, node in slurm.nodes.items():
        shown = slurm.show("node", name)
        assert shown["NodeAddr"] == node.address == slurm.node_address(name)
        assert shown["Gres"] == "gpu:2"
    assert len({n.address for n in slurm.nodes.values()}) == 2
    assert "UP" in slurm.run("scontrol", "ping").stdout


def test_two_node_step_runs_once_on_each_node(slurm: SlurmLab) -> None:
    out = slurm.shared_dir / "two-node"
    out.mkdir()
    step = (
        'echo "$SLURM_NODEID $SLURM_JOB_NODELIST $SLURMD_NODENAME $(hostname) $(hostname -I) '
        f'$(getent hosts sn1 | cut -d" " -f1)" > {out}/node-$SLURM_NODEID.txt'
    )
    job = slurm.sbatch(
        "-N2", "--ntasks-per-node=1", f"--output={out}/job.out", script=f"#!/bin/sh\nsrun sh -c '{step}'\n"
    )
    record = slurm.wait_job(job)
    assert record["JobState"] == "COMPLETED", (out / "job.out").read_text()
    assert record["NodeList"] == "sn[0-1]"
    rows = {}
    for i in (0, 1):
        node_id, nodelist, nodename, hostname, address, sn1 = (out / f"node-{i}.txt").read_text().split()
        rows[node_id] = (nodelist, nodename, hostname, address, sn1)
    sn0, sn1 = slurm.nodes["sn0"].address, slurm.nodes["sn1"].address
    assert rows == {"0": ("sn[0-1]", "sn0", "sn0", sn0, sn1), "1": ("sn[0-1]", "sn1", "sn1", sn1, sn1)}

    # a client's way from a job to its head node's address: the node list, expanded, then NodeAddr
    nodelist = (
        slurm.run("squeue", "-h", "-j", job, "-t", "all", "-o", "%N", check=True).stdout.strip() or record["NodeList"]
    )
    head = slurm.run("scontrol", "show", "hostnames", nodelist, check=True).stdout.split()[0]
    node = slurm.run("scontrol", "show", "node", head, check=True).stdout
    assert head == "sn0" and f"NodeAddr={sn0} " in node


def test_job_server_is_reached_at_its_node_address_until_cancelled(slurm: SlurmLab, tmp_path: Path) -> None:
    (slurm.shared_dir / "served").mkdir()
    (slurm.shared_dir / "served" / "marker.txt").write_text("from the job\n")
    address = slurm.node_address("sn0")
    job = slurm.sbatch(
        "-w",
        "sn0",
        "-N1",
        f"--output={tmp_path}/server.out",
        script=(
            f"#!/bin/sh\nexec {sys.executable} -m http.server --bind {address} {PORT} "
            f"--directory {slurm.shared_dir / 'served'}\n"
        ),
    )
    assert slurm.wait_job(job, {"RUNNING"})["NodeList"] == "sn0"
    deadline = time.monotonic() + 20
    while True:
        try:
            assert _get(f"http://{address}:{PORT}/marker.txt") == "from the job\n"
            break
        except (urllib.error.URLError, OSError):
            assert time.monotonic() < deadline, (tmp_path / "server.out").read_text()
            time.sleep(0.1)
    assert not _port_open(slurm.nodes["sn1"].address, PORT)  # sn1 is another machine

    slurm.run("scancel", job, check=True)
    assert slurm.wait_job(job)["JobState"] == "CANCELLED"
    deadline = time.monotonic() + 10
    while _port_open(address, PORT):
        assert time.monotonic() < deadline, "the job's server outlived scancel"
        time.sleep(0.1)


def test_drained_node_holds_a_two_node_job_until_resumed(slurm: SlurmLab, tmp_path: Path) -> None:
    slurm.run("scontrol", "update", "NodeName=sn1", "State=DRAIN", "Reason=test", check=True)
    assert slurm.node_states()["sn1"] == "drained"
    assert slurm.show("node", "sn1")["Reason"].startswith("test")
    job = slurm.sbatch("-N2", f"--output={tmp_path}/job.out", script="#!/bin/sh\ntrue\n")
    deadline = time.monotonic() + 15
    while True:
        state, reason = slurm.run("squeue", "-h", "-j", job, "-o", "%T|%r", check=True).stdout.strip().split("|")
        if state == "PENDING" and reason not in ("None", ""):
            break
        assert state == "PENDING" and time.monotonic() < deadline, (state, reason)
        time.sleep(0.2)
    assert reason == "ReqNodeNotAvail, UnavailableNodes:sn1"

    slurm.resume("sn1")
    record = slurm.wait_job(job, timeout=20)
    assert record["JobState"] == "COMPLETED" and record["NodeList"] == "sn[0-1]"


def test_final_states_stay_readable(slurm: SlurmLab, tmp_path: Path) -> None:
    ok = slurm.sbatch("-N1", f"--output={tmp_path}/ok.out", script="#!/bin/sh\ntrue\n")
    failed = slurm.sbatch("-N1", f"--output={tmp_path}/failed.out", script="#!/bin/sh\nexit 3\n")
    started = tmp_path / "started"
    cancelled = slurm.sbatch(
        "-N1", f"--output={tmp_path}/cancelled.out", script=f"#!/bin/sh\ntouch {started}\nexec sleep 300\n"
    )
    deadline = time.monotonic() + 15
    while not started.exists():
        assert time.monotonic() < deadline, slurm.job(cancelled)
        time.sleep(0.05)
    slurm.run("scancel", cancelled, check=True)
    # ExitCode is <status>:<signal>: the cancelled script (sleep, by exec) ends by scancel's SIGTERM
    # (a shell still waiting for its child may instead exit 143 first: 143:0)
    expected = {ok: ("COMPLETED", "0:0"), failed: ("FAILED", "3:0"), cancelled: ("CANCELLED", "0:15")}
    for job, (state, exit_code) in expected.items():
        record = slurm.wait_job(job)
        assert (record["JobState"], record["ExitCode"]) == (state, exit_code)
    time.sleep(0.5)  # still there after the end: MinJobAge keeps finished jobs in slurmctld for 10 minutes
    assert {job: slurm.job(job)["JobState"] for job in expected} == {job: s for job, (s, _) in expected.items()}
    assert slurm.run("squeue", "-h", "-j", ok, "-t", "all", "-o", "%T").stdout.strip() == "COMPLETED"

    # no slurmdbd: plain sacct refuses, sacct --completion reads the job-completion file
    assert "accounting storage is disabled" in slurm.run("sacct").stderr
    out = slurm.run(
        "sacct", "--completion", "-j", ",".join(expected), "-o", "JobID,State,ExitCode", "-n", "-P", check=True
    ).stdout
    rows = {line.split("|")[0]: tuple(line.split("|")[1:]) for line in out.splitlines() if line.strip()}
    # the file is written when slurmctld ends the job, before the script's signal is known: 0:0 there
    assert rows == {**expected, cancelled: ("CANCELLED", "0:0")}


def test_gpus_are_counted_and_scheduled(slurm: SlurmLab, tmp_path: Path) -> None:
    job = slurm.sbatch(
        "-N2",
        "--gres=gpu:2",
        f"--output={tmp_path}/gpu.out",
        script="#!/bin/sh\nsrun sh -c 'echo \"$SLURMD_NODENAME $CUDA_VISIBLE_DEVICES\"'\n",
    )
    assert slurm.wait_job(job)["JobState"] == "COMPLETED"
    assert sorted((tmp_path / "gpu.out").read_text().splitlines()) == ["sn0 0,1", "sn1 0,1"]
    too_many = slurm.run("sbatch", "-N1", "--gres=gpu:3", "--wrap=true")
    assert too_many.returncode != 0 and "Requested node configuration is not available" in too_many.stderr
