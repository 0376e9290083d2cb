"""`deploy --dry-run` says what a deploy's prove would say, in the fast tier: on fake hosts (local
transports, the engine double) each host's proof is shown, `prove ok` or each problem with its check
and fix, and a proof that fails on any host exits 3, as the deploy would; on a Slurm entry the
scheduler is asked too (`sbatch --test-only`, a stand-in here as in tests/release/test_slurm_platform.py),
from a temporary directory, the state root untouched."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from specctl.flows import servers, static
from specctl.hosts.inventory import HostSpec
from specctl.profile.inventory import SlurmCluster
from tests.factory import Scenario
from tests.fakes.inputs import fast_inputs, write_profile

SECRET = "SPECCTL_TEST_DRY_RUN_SECRET"


@pytest.fixture
def two_hosts(tmp_path: Path, cli: Any, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake_hosts.add("h0", "h1")
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory(groups={"all": ["h0", "h1"]})))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    monkeypatch.delenv(SECRET, raising=False)
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["all"])
    return v1


def test_a_dry_run_shows_each_hosts_proof_and_exits_3_when_it_fails(
    cli: Any, two_hosts: Path, fake_hosts: Any, fake_engine: Any
) -> None:
    good = cli("deploy", str(two_hosts), "--dry-run")
    assert good.code == 0, good.stdout + good.stderr
    assert "prove ok on h0, h1" in good.stdout.splitlines(), good.stdout
    wide = cli("deploy", str(two_hosts), "--dry-run", "-o", "wide")
    assert wide.code == 0 and "prove" in wide.stdout.splitlines()[2], wide.stdout

    bad = write_profile(two_hosts.parent / "v3.yaml", two_hosts.name, 3, secrets=[SECRET])
    before = sorted(str(p) for host in ("h0", "h1") for p in fake_hosts.root(host).rglob("*"))
    shown = cli("deploy", str(bad), "--dry-run", "--skip-check")
    assert shown.code == 3, shown.stdout + shown.stderr  # a deploy would fail at prove: a host failure
    said = " ".join(shown.stdout.split())  # the lines as rich wrapped them, joined
    for host in ("h0", "h1"):
        assert f"prove FAILED on {host} (a deploy would stop at it, before stopping anything):" in said, said
    assert said.count(f"secret: {SECRET} is named in secrets: but not set in this environment") == 2, said
    assert f"fix: set {SECRET} (export {SECRET}=...), or drop it from secrets: if the model is public" in said
    assert "prove ok" not in said
    as_json = cli("--json", "deploy", str(bad), "--dry-run", "--skip-check")
    assert as_json.code == 3 and all(not row["prove"]["ok"] for row in as_json.json()["dry_run"])
    wide = cli("deploy", str(bad), "--dry-run", "--skip-check", "-o", "wide")
    assert wide.code == 3 and f"FAILED: secret: {SECRET} is named" in " ".join(wide.stdout.split()), wide.stdout
    assert sorted(str(p) for host in ("h0", "h1") for p in fake_hosts.root(host).rglob("*")) == before
    assert not fake_engine.servers


def _cluster(tmp_path: Path, sbatch: str) -> HostSpec:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "sbatch").write_text("#!/bin/sh\n" + sbatch + "\n")
    (bin_dir / "sbatch").chmod(0o755)
    root = tmp_path / "cluster-root"
    root.mkdir()
    cluster = SlurmCluster(kind="slurm", login="local", root=str(root), env={"PATH": f"{bin_dir}:{os.environ['PATH']}"})
    return HostSpec("lab", str(root), None, None, {}, slurm=cluster)


def test_a_dry_run_on_slurm_asks_sbatch_test_only_and_writes_nothing_in_the_root(tmp_path: Path) -> None:
    """The job script as `start` would submit it, given to `sbatch --test-only` from a directory of its
    own, removed after; a refusal is a `start` problem with the scheduler's words."""
    saw = tmp_path / "saw"
    refuse = tmp_path / "refuse"
    sbatch = (
        f'printf "%s\\n" "$PWD" "$*" >>{saw}; cat job.sbatch >{tmp_path}/job-seen; '
        f'if [ -e {refuse} ]; then echo "sbatch: error: Batch job submission failed: Invalid account" >&2; exit 1; fi; '
        'echo "sbatch: Job 99 to start at 2026-12-05T02:00:00 using 1 processors on nodes n1 in partition debug"'
    )
    spec = _cluster(tmp_path, sbatch)
    report = static.check(Scenario(tmp_path / "inputs").write())

    [row] = servers.preview(servers.Reach(), report, [spec], secrets_env={})
    assert row["prove"] == {"ok": True, "problems": []}, row["prove"]
    where, argv = saw.read_text().splitlines()
    assert argv == "--test-only job.sbatch 0"
    assert "#SBATCH" in (tmp_path / "job-seen").read_text()  # the job script start would submit
    assert not where.startswith(str(tmp_path / "cluster-root")) and not Path(where).exists()  # scratch, removed
    assert list((tmp_path / "cluster-root").rglob("*")) == []  # the state root is not written

    refuse.touch()
    [row] = servers.preview(servers.Reach(), report, [spec], secrets_env={})
    assert not row["prove"]["ok"]
    [problem] = row["prove"]["problems"]
    assert problem["check"] == "start" and "sbatch --test-only refused the job" in problem["message"]
    assert "Invalid account" in problem["message"] and "lab's inventory entry" in problem["fix"], problem
    assert list((tmp_path / "cluster-root").rglob("*")) == []
