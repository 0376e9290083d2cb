"""The Slurm batch script of a release: its #SBATCH lines from the cluster entry, and, run by the real
`sh` with `scontrol` and `srun` stand-ins on PATH (the Slurm lab runs the real ones), node rank 0's
address handed to every rank's launch script, the allocation's facts written, and each rank running
its own script."""

from __future__ import annotations

import os
import shlex
import subprocess
from pathlib import Path

import pytest

from specctl.constants import HEAD_ADDRESS
from specctl.flows import static
from specctl.plan.plan import Plan
from specctl.plan.render import render_sh
from specctl.plan.sbatch import HEAD_FILE, JOB_FILE, SECRETS_COMMENT, JobSettings, job_name, render_sbatch
from specctl.profile.inventory import SlurmCluster
from specctl.release.slurm import job_files
from tests.factory import Scenario, merge


def two_node_plan(tmp_path: Path) -> tuple[static.CheckReport, Plan]:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"parallel": {"tp": 2, "nnodes": 2}, "hardware": {"gpus_per_node": 1}})
    report = static.check(s.write())
    return report, static.plan(report, node0_address=HEAD_ADDRESS)


def test_the_cluster_entry_becomes_sbatch_options(tmp_path: Path) -> None:
    _, plan = two_node_plan(tmp_path)
    job = JobSettings(
        "/shared/p/releases/r1",
        "/shared/p",
        "r1",
        plan.profile,
        partition="gpu",
        account="team a",
        time="01:00:00",
        gres="gpu:1",
        sbatch_args=("--exclusive",),
        srun_args=("--container-image=img:1",),
    )
    script = render_sbatch(plan, job)
    directives = [line.removeprefix("#SBATCH ") for line in script.splitlines() if line.startswith("#SBATCH")]
    assert directives == [
        f"--job-name={job_name(plan.profile, 'r1')}",
        "--nodes=2",
        "--ntasks-per-node=1",
        "--output=/shared/p/releases/r1/server.log",
        "--open-mode=append",
        "--chdir=/shared/p/releases/r1",
        "--exclusive",
        "--mem=0",
        "--partition=gpu",
        "'--account=team a'",
        "--time=01:00:00",
        "--gres=gpu:1",
        "--exclusive",
    ]
    assert (
        'srun --kill-on-bad-exit=1 --ntasks=2 --ntasks-per-node=1 --cpus-per-task="$cpus" --container-image=img:1 sh -c'
        in script
    )


def test_every_rank_meets_at_the_allocations_first_node(tmp_path: Path) -> None:
    report, plan = two_node_plan(tmp_path)
    release = tmp_path / "shared" / "p" / "releases" / "r1"
    release.mkdir(parents=True)
    cluster = SlurmCluster(kind="slurm", login="local", root=str(tmp_path / "shared"), setup=["export SITE_SETUP=done"])
    inputs = report.inputs
    files = job_files(plan, inputs.profile, inputs.engine.distribution(), cluster, str(release), "r1", plan.profile)
    for name, (data, mode) in {**files, "launch.sh": (render_sh(plan, plan.nodes[0]).encode(), 0o755)}.items():
        (release / name).write_bytes(data)
        (release / name).chmod(mode)
    # stand-ins for the Slurm commands the job calls; every rank's launch script records its argv instead of exec'ing
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "scontrol").write_text(
        '#!/bin/sh\ncase "$2" in hostnames) echo n7; echo n8;; node) '
        'echo "NodeName=n7 Arch=x86_64 NodeAddr=10.9.0.7 NodeHostName=n7";; esac\n'
    )
    (bin_dir / "srun").write_text(
        # each step starts elsewhere, as in a container that starts in its image's WORKDIR
        '#!/bin/sh\nwhile [ "${1#-}" != "$1" ]; do shift; done\ncd /\nfor r in 0 1; do SLURM_NODEID=$r "$@"; done\n'
    )
    for name in ("launch.sh", "launch-1.sh"):
        text = (release / name).read_text().replace("\nexec ", '\necho "$SITE_SETUP" ', 1)
        (release / name).write_text(text)
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {
        "PATH": f"{bin_dir}:{os.environ['PATH']}",
        "SLURM_JOB_NODELIST": "n[7-8]",
        "SLURM_JOB_ID": "42",
        "SLURM_JOB_CPUS_PER_NODE": "8(x2)",
    }
    done = subprocess.run(
        ["sh", str(release / JOB_FILE), "0"], capture_output=True, text=True, env=env, cwd=tmp_path, check=True
    )
    ranks = [line.split() for line in done.stdout.splitlines() if line.startswith("done ")]
    assert len(ranks) == 2
    for rank, argv in enumerate(ranks):
        assert argv[argv.index("--node-rank") + 1] == str(rank)
        assert argv[argv.index("--dist-init-addr") + 1] == "10.9.0.7:" + str(
            report.inputs.profile.parallel.dist_init_port
        )
    assert (
        release / HEAD_FILE
    ).read_text() == "42 10.9.0.7\n"  # which job wrote it: a resubmitted release's old one is not read
    assert done.stdout.startswith("specctl: job 42 started on n[7-8]\n")
    assert "disk_free_kib=" in (release / "allocation-facts.txt").read_text()


def test_the_head_address_is_the_launch_lines_only_expansion(tmp_path: Path) -> None:
    _, plan = two_node_plan(tmp_path)
    script = render_sh(plan, plan.nodes[1])
    command = script[script.index("\nexec ") :]  # the last command, over its continuation lines
    assert '"${SPECCTL_HEAD_ADDRESS}":50000' in command and command.count("$") == 1


def test_a_steps_secrets_come_through_its_pipe_whole_and_only_whole(tmp_path: Path) -> None:
    """The step's reading of its named pipe, run by the real `sh`: values with spaces, quotes and
    newlines arrive exactly; a feed cut before its closing "." starts nothing."""
    import base64
    import threading

    from specctl.plan.sbatch import _secrets_read

    values = {"HF_TOKEN": "hf_abc 'q' \"d\"\n$x", "OTHER": ""}
    fed = "".join(f"{k}={base64.b64encode(v.encode()).decode()}\n" for k, v in values.items())
    env = {**os.environ, "SLURM_JOB_ID": "7", "SLURMD_NODENAME": "n0"}
    pipe = tmp_path / "secrets-7-n0.fifo"

    def feed(text: str) -> None:
        while not pipe.exists():
            pass
        pipe.write_text(text)

    for text, whole in ((fed + ".\n", True), (fed, False)):
        writer = threading.Thread(target=feed, args=(text,))
        writer.start()
        step = _secrets_read() + 'printf "%s|" "$HF_TOKEN" "${OTHER-unset}"'
        done = subprocess.run(["sh", "-c", step], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=30)
        writer.join()
        assert not pipe.exists()
        if whole:
            assert done.returncode == 0 and done.stdout == values["HF_TOKEN"] + "||", done
        else:
            assert done.returncode == 1 and "no secrets came to n0" in done.stderr and not done.stdout


def test_secrets_are_named_in_the_job_script_never_valued(tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"secrets": ["HF_TOKEN"]})
    report = static.check(s.write())
    plan = static.plan(report, node0_address=HEAD_ADDRESS)
    script = render_sbatch(plan, JobSettings("/shared/p/releases/r1", "/shared/p", "r1", plan.profile))
    assert f"{SECRETS_COMMENT} HF_TOKEN" in script.splitlines() and "mkfifo -m 600" in script
    plain = render_sbatch(
        static.plan(static.check(Scenario(tmp_path / "b").write()), node0_address=HEAD_ADDRESS),
        JobSettings("/s/p/releases/r1", "/s/p", "r1", "p"),
    )
    assert "mkfifo" not in plain and SECRETS_COMMENT not in plain


# the container examples of docs/slurm-containers.md: each node's step runs in the image, through
# pyxis's srun flags or with apptainer as the command srun starts
CONTAINERS = {
    "pyxis": [
        "--container-image=lmsysorg/sglang:v0.5.23",
        "--container-mounts=/lustre/team/specctl:/lustre/team/specctl,/lustre/models:/lustre/models:ro",
    ],
    "apptainer": ["apptainer", "exec", "--nv", "--bind", "/lustre/team/specctl,/lustre/models", "/images/sglang.sif"],
}


@pytest.mark.parametrize("shell", ["sh", "dash", "bash"])
@pytest.mark.parametrize("secrets", [False, True], ids=["plain", "secrets"])
@pytest.mark.parametrize("runtime", list(CONTAINERS))
def test_the_job_script_and_each_nodes_step_parse(tmp_path: Path, shell: str, secrets: bool, runtime: str) -> None:
    """What the batch shell and the container's shell read: the job script, its `srun ... sh -c STEP`
    (run by the image's sh, so checked on its own), the facts script and every launch script."""
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"parallel": {"tp": 2, "nnodes": 2}, "hardware": {"gpus_per_node": 1}})
    if secrets:
        s.profile["secrets"] = ["HF_TOKEN"]
    report = static.check(s.write())
    plan = static.plan(report, node0_address=HEAD_ADDRESS)
    cluster = SlurmCluster(
        kind="slurm",
        login="local",
        root="/lustre/team/specctl",
        setup=["module load cuda/12.8"],
        srun_args=CONTAINERS[runtime],
    )
    release = "/lustre/team/specctl/p/releases/r1"
    files = job_files(plan, report.inputs.profile, report.inputs.engine.distribution(), cluster, release, "r1", "p")
    texts = {name: data.decode() for name, (data, _) in files.items()}
    texts["launch.sh"] = render_sh(plan, plan.nodes[0])
    job = texts[JOB_FILE]
    words = shlex.split(job[job.index("\nsrun ") + 1 :])  # the last command; the step may span lines
    srun_args = CONTAINERS[runtime]
    assert words[-3 - len(srun_args) :] == [*srun_args, "sh", "-c", words[-1]]
    texts["step"] = words[-1]
    assert texts["step"].startswith(f"cd {release} || exit 1; ")
    assert ("mkfifo" in texts["step"]) == secrets
    for name, text in texts.items():
        checked = subprocess.run([shell, "-n", "-c", text], capture_output=True, text=True)
        assert checked.returncode == 0, (name, checked.stderr)
    broken = subprocess.run([shell, "-n", "-c", texts["step"] + "; fi"], capture_output=True, text=True)
    assert broken.returncode != 0  # the check does catch a script that does not parse
