"""The Slurm target when the controller misbehaves: `squeue`, `scontrol` and `scancel` stand-ins on
the cluster entry's PATH play the failures the real lab cannot (a controller that does not answer, a
purged job id, a reason no wait clears, a refused scancel). Everything else about the target runs
against real Slurm in tests/integration/test_slurm_deploy.py."""

from __future__ import annotations

import os
import re
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from specctl.errors import ConnectionLost, HostError
from specctl.hosts.local import local_transport
from specctl.plan.sbatch import SECRETS_COMMENT
from specctl.profile.inventory import SlurmCluster
from specctl.release import slurm as slurm_module
from specctl.release.release import Release
from specctl.release.slurm import SlurmPlatform, with_time_limit


def target(tmp_path: Path, **tools: str) -> tuple[SlurmPlatform, Release]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(parents=True, exist_ok=True)
    for name, body in tools.items():
        (bin_dir / name).write_text("#!/bin/sh\n" + body + "\n")
        (bin_dir / name).chmod(0o755)
    cluster = SlurmCluster(
        kind="slurm", login="local", root=str(tmp_path), env={"PATH": f"{bin_dir}:{os.environ['PATH']}"}
    )
    release = Release(local_transport("lab"), str(tmp_path), "p", "r1")
    Path(release.dir).mkdir(parents=True)
    return SlurmPlatform(local_transport("lab"), cluster), release


def test_a_controller_that_does_not_answer_is_an_error_never_no_jobs(tmp_path: Path) -> None:
    slurm, release = target(
        tmp_path, squeue='echo "squeue: error: Socket timed out on send/recv operation" >&2; exit 1'
    )
    with pytest.raises(HostError):
        slurm.servers(release.base)
    seen = slurm.observe(release, 7)
    assert seen.alive and "squeue did not answer" in (seen.waiting or "") and "Socket timed out" in (seen.waiting or "")


def test_jobs_of_other_roots_and_finished_ones_are_not_the_profiles(tmp_path: Path) -> None:
    rows = [  # squeue -o '%i|%j|%T|%L|%Z': the work directory last
        f"11|specctl:p:r1|RUNNING|6-23:59:01|{tmp_path}/p/releases/r1",
        "12|specctl:p:r2|RUNNING|1:00|/other/root/p/releases/r2",
        f"13|specctl:p:r3|COMPLETING|0:00|{tmp_path}/p/releases/r3",
        f"14|specctl:px:r4|PENDING|1:00|{tmp_path}/px/releases/r4",
        f"15|specctl:p:r5|REQUEUE_HOLD|7-00:00:00|{tmp_path}/p/releases/r5",
    ]
    slurm, release = target(tmp_path, squeue="printf '%s\\n' " + " ".join(f"'{r}'" for r in rows))
    found = [(s.release, s.handle, s.note) for s in slurm.servers(release.base)]
    assert [(r, h) for r, h, _ in found] == [("r1", 11), ("r5", 15)]
    assert found[0][2].startswith("RUNNING, 6-23:59:01 left; serving stops at ")  # type: ignore[union-attr]
    assert found[1][2] == "REQUEUE_HOLD, 7-00:00:00 left"


def test_a_running_jobs_time_limit_says_when_serving_stops_and_is_flagged_when_near() -> None:
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    assert with_time_limit("RUNNING, 1-02:00:00 left", now) == (
        "RUNNING, 1-02:00:00 left; serving stops at 2027-01-16T10:00:00Z (time limit)"
    )
    assert with_time_limit("RUNNING, 59:00 left", now) == (
        "RUNNING, 59:00 left; TIME LIMIT NEAR: serving stops at 2027-01-15T08:59:00Z (time limit)"
    )
    for note in ("RUNNING, UNLIMITED left", "PENDING, 1:00 left", "RUNNING, NOT_SET left", None):
        assert with_time_limit(note, now) == note


def test_an_ended_job_is_explained_by_the_controller_then_accounting_then_not_at_all(tmp_path: Path) -> None:
    record = (
        "JobId=7 JobName=x JobState=TIMEOUT Reason=TimeLimit Dependency=(null) ExitCode=0:15 "
        "EndTime=2026-12-03T15:00:00"
    )
    slurm, release = target(tmp_path, scontrol=f"echo '{record}'")
    Path(release.path("job-id")).write_text("7\n")
    assert slurm.ended(release) == (
        "job 7 ended at 2026-12-03T15:00:00: TIMEOUT (its time limit was reached; reason TimeLimit; exit code 0:15)"
    )
    slurm, release = target(tmp_path / "b", scontrol="exit 1", sacct="echo 'CANCELLED by 1000|0:0|2026-12-03T15:01:00'")
    Path(release.path("head-address")).write_text("8 10.0.0.8\n")  # a release from before job-id files
    assert slurm.ended(release) == "job 8 ended at 2026-12-03T15:01:00: CANCELLED by 1000 (cancelled)"
    slurm, release = target(
        tmp_path / "c", scontrol="exit 1", sacct="echo 'accounting storage is disabled' >&2; exit 1"
    )
    Path(release.path("job-id")).write_text("9\n")
    assert slurm.ended(release) == "job 9 ended; the controller no longer reports why"
    slurm, release = target(tmp_path / "d")
    assert slurm.ended(release) is None  # never submitted


def test_a_purged_job_has_ended_and_a_reason_no_wait_clears_ends_the_start(tmp_path: Path) -> None:
    slurm, release = target(tmp_path, squeue='echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1')
    seen = slurm.observe(release, 7)
    assert not seen.alive and seen.ended == "job 7 ended: gone"
    slurm, release = target(tmp_path / "b", squeue="echo 'PENDING|PartitionTimeLimit|'")
    seen = slurm.observe(release, 8)
    assert not seen.alive and "can never start as submitted" in (seen.ended or "")
    slurm, release = target(tmp_path / "c", squeue="echo 'PENDING|Resources|'")
    assert slurm.observe(release, 9).waiting == "job 9 pending (Resources)"


def test_only_the_jobs_own_address_and_log_are_read(tmp_path: Path) -> None:
    slurm, release = target(tmp_path, squeue="echo 'RUNNING|None|n1'")
    Path(release.path("head-address")).write_text("6 10.0.0.6\n")  # an earlier job of this release
    Path(release.path("server.log")).write_text(
        "specctl: job 6 started on n0\nold: ready\nspecctl: job 7 started on n1\nloading\n"
    )
    seen = slurm.observe(release, 7)
    assert seen.address is None and seen.waiting == "job 7 on n1"
    assert seen.lines == ["specctl: job 7 started on n1", "loading"]
    Path(release.path("head-address")).write_text("7 10.0.0.7\n")
    assert slurm.observe(release, 7).address == "10.0.0.7" and slurm.address(release) == "10.0.0.7"


def test_a_refused_scancel_is_an_error(tmp_path: Path) -> None:
    listing = f"echo '21|specctl:p:r1|RUNNING|1:00|{tmp_path}/p/releases/r1'"
    slurm, release = target(
        tmp_path,
        squeue=listing,
        scancel='echo "scancel: error: Kill job error on job id 21: Access/permission denied" >&2; exit 1',
    )
    with pytest.raises(HostError, match="permission denied"):
        slurm.stop(release)


def test_the_callers_sbatch_settings_do_not_reach_sbatch(tmp_path: Path) -> None:
    seen = tmp_path / "sbatch-saw"
    slurm, release = target(
        tmp_path, sbatch=f'echo "partition=${{SBATCH_PARTITION:-unset}} args=$*" >{seen}; echo "31;cluster-a"'
    )
    Path(release.path("head-address")).write_text("6 10.0.0.6\n")
    os.environ["SBATCH_PARTITION"] = "debug"
    try:
        assert slurm.start(release, confirm_within_s=60) == 31
    finally:
        del os.environ["SBATCH_PARTITION"]
    assert not Path(release.path("head-address")).exists()  # the resubmitted release's old address is gone
    saw = seen.read_text()  # a comment of this submission's own; the deadline + shared storage's slack
    assert re.fullmatch(r"partition=unset args=--parsable --comment=specctl:r1:[0-9a-f]{8} job\.sbatch 180\n", saw)
    assert Path(release.path("job-id")).read_text() == "31\n"


def test_a_submission_whose_reply_was_lost_is_adopted_by_its_comment_or_made_again(tmp_path: Path) -> None:
    """The connection drops under sbatch (a transport that loses the first reply), its sbatch over: the
    job it answered (kept in the release), else the job the controller holds with this submission's
    comment, is adopted, never submitted twice; with neither (it died before submitting), it is submitted."""
    cases = (
        ("answered", 46, 1),  # sbatch answered into the release directory; the reply alone was lost
        ("held", 44, 1),  # sbatch died once the controller held the job, before it answered
        ("none", 45, 2),  # sbatch died before it submitted anything
    )
    for case, expected, submissions in cases:
        d = tmp_path / case
        count = d / "submitted"
        squeue = f'for c in $(cat {d}/comments 2>/dev/null); do echo "44|$c"; done; echo "12|specctl:other:1"'
        record = f'for a in "$@"; do case $a in --comment=*) echo "${{a#--comment=}}" >{d}/comments;; esac; done'
        first = f'[ "$(wc -l <{count})" -eq 1 ]'
        sbatch = {
            "answered": "echo 46",
            "held": f"{first} && {{ {record}; kill -9 $$; }}; echo 47",
            "none": f"{first} && kill -9 $$; echo 45",
        }[case]
        slurm, release = target(d, sbatch=f"echo x >>{count}; {sbatch}", squeue=squeue)
        slurm.transport = _LosesFirstReply(slurm.transport)  # type: ignore[assignment]
        assert slurm.start(release, confirm_within_s=60) == expected, case
        assert len(count.read_text().split()) == submissions, case
        assert Path(release.path("job-id")).read_text().strip() == str(expected)


def test_a_lost_reply_is_not_submitted_again_while_its_sbatch_still_runs(tmp_path: Path) -> None:
    """The reply is lost while sbatch still runs (a slow controller): the first sbatch is waited for,
    by the pid it recorded before it ran, and the job it submits is the one followed: one submission.
    One still running past the wait is an error, and nothing is submitted again."""
    d = tmp_path / "slow"
    count = d / "submitted"
    slurm, release = target(d, sbatch=f"echo x >>{count}; sleep 2; echo 51", squeue="true")
    slurm.transport = _LosesReplyAtOnce(slurm.transport)  # type: ignore[assignment]
    began = time.monotonic()
    assert slurm.start(release, confirm_within_s=60) == 51
    assert time.monotonic() - began >= 1.5  # waited for the first sbatch to end
    assert count.read_text().split() == ["x"]  # never submitted twice
    pid, start, comment = Path(release.path("submit.pid")).read_text().split()
    assert pid.isdigit() and start.isdigit() and comment.startswith("specctl:r1:")

    d = tmp_path / "stuck"
    count = d / "submitted"
    slurm, release = target(d, sbatch=f"echo x >>{count}; exec sleep 30", squeue="true")
    slurm.transport = _LosesReplyAtOnce(slurm.transport)  # type: ignore[assignment]
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(slurm_module, "SUBMIT_GONE_S", 1.0)
        with pytest.raises(HostError, match=r"still runs 1 s later: the job is not submitted again"):
            slurm.start(release, confirm_within_s=60)
    assert count.read_text().split() == ["x"]
    os.kill(int(Path(release.path("submit.pid")).read_text().split()[0]), signal.SIGKILL)  # the stuck sbatch


class _LosesReplyAtOnce:
    """A transport whose sbatch command is started, and whose connection drops while it runs."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.lost = inner, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, argv: Any, **kwargs: Any) -> Any:
        if not self.lost and "sbatch --parsable" in " ".join(argv):
            self.lost = True
            threading.Thread(target=lambda: self.inner.run(argv, **kwargs), daemon=True).start()
            time.sleep(0.5)  # the command reached the host
            raise ConnectionLost("lab: the connection was lost", host="lab")
        return self.inner.run(argv, **kwargs)


def test_a_second_live_job_of_a_release_whose_reply_was_lost_is_cancelled_when_seen(tmp_path: Path) -> None:
    cancelled = tmp_path / "cancelled"
    squeue = (
        'case "$*" in *"%i|%T|%k"*) echo "61|RUNNING|specctl:r1:aaaa"; echo "62|PENDING|specctl:r1:bbbb"; '
        'echo "63|CANCELLED|specctl:r1:cccc"; echo "64|RUNNING|specctl:r10:dddd"; echo "65|RUNNING|";; '
        f'*"%T|%r|%N"*) echo "RUNNING|None|n1";; *) [ -e {cancelled} ] || echo RUNNING;; esac'
    )
    slurm, release = target(tmp_path, squeue=squeue, scancel=f'echo "$*" >{cancelled}')
    assert slurm.observe(release, 61).notes == ()
    assert not cancelled.exists()  # no reply was lost: nothing is looked for
    slurm._lost.add("r1")
    seen = slurm.observe(release, 61)
    assert cancelled.read_text().split() == ["62"]  # the release's other live job; not another release's
    # said once, to a person, even when the job is ready (wait_ready passes a look's notes to on_note)
    assert seen.notes == ("cancelled job(s) 62 of release r1 beside job 61",), seen


def test_sbatch_test_only_proves_the_job_and_submits_nothing(tmp_path: Path) -> None:
    saw = tmp_path / "saw"
    refuse = 'echo "sbatch: error: Batch job submission failed: Invalid account or account/partition combination"'
    sbatch = f'echo "$*" >{saw}; if grep -q nope job.sbatch; then {refuse} >&2; exit 1; fi'
    slurm, release = target(tmp_path, sbatch=sbatch)
    Path(release.path("job.sbatch")).write_text("#!/bin/sh\n#SBATCH --account=ok\n")
    assert slurm.prove_start(release) == []
    assert saw.read_text().split() == ["--test-only", "job.sbatch", "0"]
    Path(release.path("job.sbatch")).write_text("#!/bin/sh\n#SBATCH --account=nope\n")
    [problem] = slurm.prove_start(release)
    assert "sbatch --test-only refused the job" in problem and "Invalid account" in problem


def test_the_jobs_time_limit_and_when_serving_stops(tmp_path: Path) -> None:
    slurm, release = target(tmp_path, squeue="echo '1:00|RUNNING|0:45'")
    Path(release.path("job-id")).write_text("71\n")
    said = slurm.time_limit(release) or ""
    assert re.fullmatch(r"job 71: time limit 1:00, serving stops at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", said), said
    slurm, release = target(tmp_path / "u", squeue="echo 'UNLIMITED|RUNNING|UNLIMITED'")
    Path(release.path("job-id")).write_text("72\n")
    assert slurm.time_limit(release) is None


def test_a_root_holding_a_bar_is_read_whole(tmp_path: Path) -> None:
    """squeue's work directory comes last: a root with "|" (and spaces) still finds its jobs."""
    root = tmp_path / "a|b c"
    row = f"81|specctl:p:r1|RUNNING|1:00|{root}/p/releases/r1"
    slurm, release = target(root, squeue=f"printf '%s\\n' '{row}'")
    assert [(s.release, s.handle) for s in slurm.servers(release.base)] == [("r1", 81)]


class _LosesFirstReply:
    """A transport whose first command runs, and whose answer is lost as a dropped connection's."""

    def __init__(self, inner: Any) -> None:
        self.inner, self.lost = inner, False

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def run(self, argv: Any, **kwargs: Any) -> Any:
        done = self.inner.run(argv, **kwargs)
        if not self.lost and "sbatch" in " ".join(argv):
            self.lost = True
            raise ConnectionLost("lab: the connection was lost", host="lab")
        return done


def test_secrets_never_reach_sbatch_unless_the_job_script_predates_their_pipes(tmp_path: Path) -> None:
    for waits, seen_by_sbatch in ((True, "unset"), (False, "s3cr3t")):
        d = tmp_path / str(waits)
        saw = d / "sbatch-saw"
        slurm, release = target(d, sbatch=f'echo "${{HF_TOKEN-unset}}" >{saw}; echo 31')
        script = "#!/bin/sh\n" + (f"{SECRETS_COMMENT} HF_TOKEN\n" if waits else "")
        Path(release.path("job.sbatch")).write_text(script)
        os.environ["HF_TOKEN"] = "s3cr3t"  # a local login: specctl's own environment holds it
        try:
            assert slurm.start(release, confirm_within_s=60, env={"HF_TOKEN": "s3cr3t"}) == 31
        finally:
            del os.environ["HF_TOKEN"]
        assert saw.read_text().strip() == seen_by_sbatch
