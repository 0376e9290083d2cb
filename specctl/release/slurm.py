"""Releases as Slurm jobs: submitted from the login node, followed in `squeue`, stopped with `scancel`.

The release directory sits on storage every node mounts; its `job.sbatch` (plan/sbatch.py) is the
job. A job is named `specctl:<profile>:<run id>`, so `squeue` alone says which releases of a
profile hold an allocation, and the job writes its head node's address into the release, so verify
and status know where to send HTTP. Each poll is one round trip to the login node.

Secrets never travel with `sbatch`: Slurm keeps a job's submission environment in the controller's
state files for the job's lifetime, and its script too. The job's steps wait for them on named pipes
of their own (plan/sbatch.py); once squeue says the job runs, specctl runs one more step beside the
server's (`srun --overlap`, one task a node) whose tasks copy their standard input into those pipes,
and that input is the secrets, sent over specctl's own connection to the login node. They are then in
the servers' environment only, where any process's environment is: readable by the node's root.
A named pipe is a name in the release directory, never data on disk; a one-shot socket would need a
port and an authenticated peer, and srun's input forwarding is already both. A release whose job
script was written before (its steps wait for nothing) still gets them in sbatch's environment, as it
always did, so that a rollback to it serves.
"""

from __future__ import annotations

import base64
import dataclasses
import shlex
import time
from collections.abc import Mapping
from secrets import token_hex
from typing import TYPE_CHECKING, Any, ClassVar

from specctl.constants import HEAD_ADDRESS, TIME_LIMIT_WARN_S
from specctl.errors import ConnectionLost, HostError
from specctl.facts import host as host_facts
from specctl.hosts.transport import Completed, Transport
from specctl.plan.plan import Plan
from specctl.plan.render import render_sh
from specctl.plan.sbatch import (
    FACTS_FILE,
    FACTS_SCRIPT,
    HEAD_FILE,
    JOB_FILE,
    JOB_PREFIX,
    SECRETS_COMMENT,
    SECRETS_FIFO,
    JobSettings,
    job_name,
    node_script,
    render_sbatch,
    sbatch_options,
)
from specctl.profile.inventory import SlurmCluster
from specctl.profile.profile import Profile
from specctl.release import release as rel
from specctl.release import whole
from specctl.release.platform import Files, Observation, Platform
from specctl.release.staging import host_env

if TYPE_CHECKING:
    from specctl.hosts.inventory import HostSpec

__all__ = ["SlurmPlatform", "job_files", "job_settings"]

# A Slurm command's behaviour follows the caller's SBATCH_* and SQUEUE_* variables, which override
# #SBATCH lines and change squeue's output: the login shell's own settings must not reach them.
_CLEAN = r"""
for v in $(env | sed -n -e 's/^\(SBATCH_[A-Za-z0-9_]*\)=.*/\1/p' -e 's/^\(SQUEUE_[A-Za-z0-9_]*\)=.*/\1/p'); do
  unset "$v"
done
"""
# This user's jobs of one profile that hold or wait for an allocation, one "run-id job-id" line each:
# named for the profile AND working in a release directory under this root (`--chdir`), so two
# roots on one cluster, or two users, never see each other's jobs. A failing squeue is an error,
# never "no jobs". The work directory comes last, and `read` gives the last name the rest of the line
# whole, so a root holding "|" is read back whole (squeue 22.05 prints %Z in full, 4000 characters
# seen, when no width is given; only a newline breaks it, and inventory refuses control characters).
# $1 = the profile's job-name prefix, $2 = its releases directory + "/".
_JOBS = (
    _CLEAN
    + r"""
jobs_of() {
  out=$(squeue --me -h -o '%i|%j|%T|%L|%Z') || return 3
  printf '%s\n' "$out" | while IFS='|' read -r id name state left dir; do
    [ -n "$id" ] || continue
    case $name in "$1"*) ;; *) continue;; esac
    case $dir in "$2"*) ;; *) continue;; esac
    case " COMPLETING COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED BOOT_FAIL DEADLINE OUT_OF_MEMORY " in
      *" $state "*) continue;; esac
    echo "${name#"$1"} $id $state, $left left"
  done
}
"""
)
# survey: half-written releases swept, `current`, then the profile's jobs. $1 = profile dir, $2 = job-name prefix.
_SURVEY = (
    _JOBS
    + r"""
for d in "$1"/releases/*.part.*; do [ -d "$d" ] && rm -rf "$d"; done
readlink "$1/current" 2>/dev/null || echo
found=$(jobs_of "$2" "$1/releases/") || exit 3
printf '%s\n' "$found" | sort -u
"""
)
# One start-up poll, three parts:
# - "state|reason|nodes"; "ended|<final state>|" once squeue no longer lists the job (or knows no
#   such id); "unknown|<error>|" when squeue itself failed (the controller did not answer);
# - the head node's address, when the job's own id wrote it (a resubmitted release's old one is not it);
# - the server log from this job's start marker on (earlier runs of the release appended before it).
# $1 job id, $2 release dir, $3 lines.
_OBSERVE = (
    _CLEAN
    + r"""
if line=$(squeue -h -j "$1" -o '%T|%r|%N' 2>&1); then
  line=$(printf '%s\n' "$line" | head -n 1)
  if [ -z "$line" ]; then
    final=$(scontrol show job "$1" -o 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
    line="ended|${final:-gone}|"
  fi
else
  case $line in
    *"Invalid job id"*) line="ended|gone|";;
    *) line="unknown|$(printf '%s' "$line" | head -n 1 | tr '|' ' ')|";;
  esac
fi
echo "$line"
read -r jid addr <"$2/head-address" 2>/dev/null || jid=""
if [ "$jid" = "$1" ]; then echo "$addr"; else echo; fi
at=$(grep -n -F "specctl: job $1 started" "$2/server.log" 2>/dev/null | tail -n 1 | cut -d: -f1)
[ -n "$at" ] && tail -n +"$at" "$2/server.log" | tail -n "$3"
true
"""
)
# Cancel jobs, then wait (on the login node) until squeue lists none of them still holding or
# waiting for nodes (COMPLETING is Slurm's own clean-up: the server is gone). $1 = tenths of seconds, $@ ids.
_CANCEL = (
    _CLEAN
    + r"""
limit=$1; shift
[ $# -gt 0 ] || exit 0
scancel "$@" || exit $?
ids=$(echo "$@" | tr ' ' ',')
i=0
while [ $i -lt "$limit" ]; do
  if out=$(squeue -h -j "$ids" -o '%T' 2>&1); then
    [ -z "$(printf '%s\n' "$out" | grep -v -x -e COMPLETING -e '')" ] && exit 0
  else
    case $out in *"Invalid job id"*) exit 0;; esac
  fi
  sleep 0.2; i=$((i+2))
done
echo "still running after scancel: $*" >&2; exit 1
"""
)
# sbatch from the release directory, without the caller's SBATCH_* and without the files a previous
# job of the same release left (a rollback resubmits it), and without the secrets should the login
# shell hold them (a local login is specctl's own environment): sbatch's environment is kept with the
# job. Before sbatch runs, the process that becomes it records its pid, start time and this
# submission's comment in `submit.pid`, and sbatch answers into `submit.out`, not into the connection:
# should the reply be lost, what the first sbatch did is read there once that pid is gone (_AWAIT).
# `submit.pid` and `job-id` are written whole (release/whole.py; the process that becomes sbatch is
# handed its functions as $1). $1 = release dir, $2 = the secrets' names, $3 = this submission's
# comment, then sbatch's arguments.
_SUBMIT = (
    _CLEAN
    + f"W={shlex.quote(whole.SH + host_facts.PROCESS_SH)}\n"
    + whole.SH
    + r"""
cd "$1" && shift && for v in $1; do unset "$v"; done && shift || exit 1
comment=$1; shift
rm -f head-address allocation-facts.txt job-id submit.out submit.err || exit 1
sh -c 'eval "$1"; shift
at=$(start_of $$) || at=-
printf "%s %s %s\n" "$$" "${at:--}" "$1" | whole "$PWD/submit.pid" move || exit
shift; exec sbatch --parsable "$@" >submit.out 2>submit.err' sh "$W" "$comment" --comment="$comment" "$@"
rc=$?
cat submit.err >&2 2>/dev/null
[ $rc -eq 0 ] || exit $rc
out=$(cat submit.out) || exit 1
printf '%s\n' "$out"
printf '%s\n' "${out%%;*}" | whole "$PWD/job-id" move
"""
)
# After a lost reply: wait (bounded) until the sbatch that `submit.pid` names for this submission is
# gone (its pid dead, or a later process with another start time), then the job it submitted: its own
# answer in `submit.out`, else the job the controller holds with this submission's comment (in any
# state), its id then kept in the release dir. Prints "gone" or "running <pid>", then the job id (or
# an empty line). A `submit.pid` of another submission means this one's sbatch never ran.
# $1 = release dir, $2 = the comment, $3 = tenths of seconds to wait.
_AWAIT = (
    _CLEAN
    + whole.SH
    + host_facts.PROCESS_SH
    + r"""
pid=; start=; comment=
read -r pid start comment <"$1/submit.pid" 2>/dev/null
if [ "$comment" = "$2" ] && [ -n "$pid" ]; then
  i=0
  while running "$pid" "$start"; do
    [ $i -lt "$3" ] || { echo "running $pid"; echo; exit 0; }
    sleep 0.2; i=$((i+2))
  done
  id=$(head -n 1 "$1/submit.out" 2>/dev/null); id=${id%%;*}
else
  id=
fi
echo gone
case $id in ''|*[!0-9]*)
  out=$(squeue --me -h -t all -o '%i|%k') || exit 3
  id=$(printf '%s\n' "$out" | while IFS='|' read -r i k; do [ "$k" = "$2" ] && echo "$i"; done | head -n 1);;
esac
[ -z "$id" ] || printf '%s\n' "$id" | whole "$1/job-id" move || exit
echo "$id"
"""
)
# The live jobs of one release other than the one followed: a submission's comment names its release
# ("specctl:<run id>:<token>"). One "id" line each. $1 = the comment's release prefix, $2 = the job kept.
_TWINS = (
    _CLEAN
    + r"""
out=$(squeue --me -h -o '%i|%T|%k') || exit 3
printf '%s\n' "$out" | while IFS='|' read -r id state k; do
  case $k in "$1"*) ;; *) continue;; esac
  [ "$id" != "$2" ] || continue
  case " COMPLETING COMPLETED CANCELLED FAILED TIMEOUT NODE_FAIL PREEMPTED BOOT_FAIL DEADLINE OUT_OF_MEMORY " in
    *" $state "*) continue;; esac
  echo "$id"
done
"""
)
# `sbatch --test-only` of the release's job as `start` would submit it: the controller says whether and
# where it would run, and submits nothing. $1 = release dir, then sbatch's arguments.
_TEST_ONLY = (
    _CLEAN
    + r"""
cd "$1" && shift || exit 1
sbatch --test-only "$@" 2>&1
"""
)
# What the controller still says of a job that squeue no longer lists: "scontrol|<one-line record>"
# while it holds the job (MinJobAge, 5 minutes by default), else "sacct|State|ExitCode|End"
# where the cluster keeps accounting, else "gone". $1 = job id.
_ENDED = (
    _CLEAN
    + r"""
line=$(scontrol show job "$1" -o 2>/dev/null | head -n 1)
case $line in *"JobState="*) echo "scontrol|$line"; exit 0;; esac
row=$(sacct -X -n -P -j "$1" -o State,ExitCode,End 2>/dev/null | head -n 1)
case $row in ?*"|"*) echo "sacct|$row"; exit 0;; esac
echo gone
"""
)
# Secrets into a running job: one task a node copies its standard input (the secrets) into the named
# pipe its node's server step made (and owns) in the release directory. $1 = job id, $2 = release dir.
_FEED = (
    f'cd "$1" || exit 3; f={SECRETS_FIFO}; i=0; '
    'until [ -p "$f" ] && [ -O "$f" ]; do i=$((i+1)); '
    '[ $i -le 300 ] || { echo "$SLURMD_NODENAME: no pipe $f after 30 s" >&2; exit 3; }; sleep 0.1; done; '
    'exec timeout 30 cat >"$f"'
)
_DELIVER = (
    _CLEAN
    + r"""
n=$(squeue -h -j "$1" -o %D) && [ -n "$n" ] || { echo "job $1 is not in squeue" >&2; exit 3; }
exec srun --jobid="$1" --overlap -N "$n" --ntasks-per-node=1 --kill-on-bad-exit=0 sh -c """
    + shlex.quote(_FEED)
    + """ sh "$2"
"""
)
# Pending reasons that no wait clears: the job can never start as submitted.
NEVER_STARTS = frozenset(
    {
        "PartitionTimeLimit",
        "PartitionNodeLimit",
        "PartitionConfig",
        "PartitionDown",
        "PartitionInactive",
        "InvalidAccount",
        "InvalidQOS",
        "AccountNotAllowed",
        "QOSNotAllowed",
        "BadConstraints",
        "DependencyNeverSatisfied",
        "JobHeldAdmin",
        "QOSMaxGRESPerJob",
        "QOSMaxNodePerJobLimit",
        "QOSMaxWallDurationPerJobLimit",
        "QOSMaxCpuPerJobLimit",
        "AssocMaxGRESPerJob",
        "AssocMaxNodesPerJobLimit",
        "AssocMaxWallDurationPerJobLimit",
        "AssocMaxCpuPerJobLimit",
    }
)
# how much later than its deadline a job cancels itself: `current` is read through the compute
# node's view of shared storage, which an NFS client may cache for up to a minute
SHARED_STORAGE_SLACK_S = 120
POLL_S = 2.0  # between squeue polls while a job starts: a controller serves many clients
JOB_ID_FILE = "job-id"  # in the release directory: the id of the job last submitted for it
# after a lost `sbatch` reply: how long its sbatch may take to end (its own retries, a slow controller)
# before specctl gives up rather than submit a second job beside one that may still land
SUBMIT_GONE_S = 120.0
SUBMIT_ATTEMPTS = 3  # submissions whose reply is lost, each proven gone without a job, before giving up
# a job's final state, as an operator reads it
_ENDINGS = {
    "TIMEOUT": "its time limit was reached",
    "CANCELLED": "cancelled",
    "NODE_FAIL": "a node failed",
    "OUT_OF_MEMORY": "out of memory",
    "FAILED": "the server exited with an error",
    "COMPLETED": "the server exited",
    "PREEMPTED": "preempted by another job",
    "BOOT_FAIL": "its nodes failed to boot",
    "DEADLINE": "its deadline passed",
}


class SlurmPlatform:
    """The servers of a cluster entry: jobs submitted, watched and cancelled through its login node."""

    kind: ClassVar[str] = "slurm"
    noun: ClassVar[str] = "a Slurm cluster"
    rolling: ClassVar[bool] = True
    on_host: ClassVar[bool] = False
    places_every_rank: ClassVar[bool] = True  # one job runs every node rank
    node0_address: ClassVar[str | None] = HEAD_ADDRESS  # the ranks meet at the allocation's first node
    tunable: ClassVar[bool] = False  # tune measures on a host it reaches itself
    poll_s: ClassVar[float] = POLL_S
    machine_root: ClassVar[bool] = False

    def __init__(self, transport: Transport, cluster: SlurmCluster) -> None:
        self.transport = transport
        self.cluster = cluster
        self._secrets: dict[int, dict[str, str]] = {}  # job id -> the secrets its steps still wait for
        self._started: dict[str, tuple[int, int]] = {}  # run id -> the job this platform submitted, its deadline (s)
        self._lost: set[str] = set()  # run ids whose submission lost a reply: a second job of theirs is looked for

    @classmethod
    def on(cls, spec: HostSpec, transport: Transport) -> Platform:
        assert spec.slurm is not None, "a Slurm platform is a cluster entry's"
        return cls(transport, spec.slurm)

    def release_files(
        self, p: Plan, profile: Profile, distribution: str, release: rel.Release, *, hf_home: str | None = None
    ) -> Files:
        """The job's files: one directory on shared storage serves the whole job."""
        return job_files(p, profile, distribution, self.cluster, release.dir, release.run_id, release.profile, hf_home)

    def dry_run_settings(self, p: Plan, profile: Profile, distribution: str, base: str) -> dict[str, Any]:
        """The `sbatch` command line the release's job would be submitted with."""
        name = base.rsplit("/", 1)[-1]
        settings = job_settings(profile, distribution, self.cluster, f"{base}/releases/<run-id>", "<run-id>", name)
        return {"job": ["sbatch", *sbatch_options(p, settings)]}

    def _run(self, script: str, *args: str, timeout_s: float = 60.0, check: bool = True) -> Completed:
        """A script of Slurm commands on the login node, in the cluster's environment; safe to send twice."""
        return self.transport.run(
            ["sh", "-c", script, "sh", *args],
            env=dict(self.cluster.env) or None,
            timeout_s=timeout_s,
            retry=True,
            check=check,
        )

    def survey_command(self, base: str) -> list[str]:
        exports = [f"{k}={v}" for k, v in sorted(self.cluster.env.items())]
        return ["env", *exports, "sh", "-c", _SURVEY, "sh", base, _prefix(base)]

    def servers(self, base: str) -> list[rel.Server]:
        done = self._run(
            _JOBS + 'found=$(jobs_of "$1" "$2") || exit 3; printf "%s\\n" "$found" | sort -u',
            _prefix(base),
            f"{base}/releases/",
        )
        found = rel.read_survey(Completed(0, b"\n" + done.out, "")).servers
        return [dataclasses.replace(s, note=with_time_limit(s.note, time.time())) for s in found]

    def ended(self, release: rel.Release) -> str | None:
        """Why the release's job no longer runs: its final state and reason, while the controller holds
        the job (or the cluster's accounting has it); None when the release never had a job."""
        job = ""
        for name in (JOB_ID_FILE, HEAD_FILE):  # written at submission; by the job itself (older releases)
            raw = self.transport.read(release.path(name))
            job = raw.decode(errors="replace").split()[0] if raw and raw.split() else ""
            if job.isdigit():
                break
        if not job.isdigit():
            return None
        return explain_end(int(job), self._run(_ENDED, job).stdout)

    def look(self, base: str) -> rel.Survey:
        root, _, profile = base.rpartition("/")
        return rel.Survey(rel.linked(self.transport, root, profile), self.servers(base))  # jobs carry their own names

    def start(self, release: rel.Release, *, confirm_within_s: float, env: Mapping[str, str] | None = None) -> int:
        script = self.transport.read(release.path(JOB_FILE)) or b""
        waits = _secret_names(script)
        # a job script written before its steps waited for their secrets gets them as it always did,
        # in sbatch's environment (a rollback to such a release still serves); every other never does
        legacy = dict(env or {}) if env and not waits else {}
        names = [] if legacy else sorted({*waits, *(env or {})})
        deadline = str(int(confirm_within_s) + SHARED_STORAGE_SLACK_S)
        submit_env = {**self.cluster.env, **legacy} or None
        done: Completed | None = None
        for _ in range(SUBMIT_ATTEMPTS):
            comment = f"{JOB_PREFIX}{release.run_id}:{token_hex(4)}"  # this submission's, should its reply be lost
            argv = ["sh", "-c", _SUBMIT, "sh", release.dir, " ".join(names), comment, JOB_FILE, deadline]
            try:
                done = self.transport.run(argv, env=submit_env, timeout_s=120, check=False)
                break
            except ConnectionLost as lost:
                self._lost.add(release.run_id)  # its start looks for a second job of the release (observe)
                job = self._submitted(release, comment, lost)
                if job is not None:
                    done = Completed(0, f"{job}\n".encode(), "")
                    break
                # that sbatch is gone and the controller holds no job of it: submitted again, under a new comment
        if done is None:
            raise ConnectionLost(
                f"{self.transport.name}: the connection was lost under sbatch {SUBMIT_ATTEMPTS} times; no job "
                f"of release {release.run_id} was submitted",
                host=self.transport.name,
                fix="check the connection to the login node, then deploy again",
            )
        if (full := whole.no_space(self.transport, done)) is not None:
            raise full  # submit.pid or job-id could not be written: sbatch was not asked, or its id is not kept
        first = done.stdout.strip().split(";")[0]
        if done.rc != 0 or not first.isdigit():
            raise HostError(
                f"{self.transport.name}: sbatch refused the job: {(done.stderr or done.stdout).strip()[-400:]}",
                host=self.transport.name,
                fix="check the cluster entry (partition, account, qos, time, gres) against `sinfo` and your allocation",
            )
        if waits:  # its steps wait for them: fed once it runs (observe)
            self._secrets[int(first)] = dict(env or {})
        self._started[release.run_id] = (int(first), int(deadline))
        return int(first)

    def _submitted(self, release: rel.Release, comment: str, lost: ConnectionLost) -> int | None:
        """After the connection was lost under `sbatch`: the job it submitted, or None once that sbatch
        is proven gone (the pid it recorded before it ran is dead, within SUBMIT_GONE_S) and submitted
        nothing (no answer of its own, no job with its comment). An sbatch still running after that, or
        a login node that does not come back, is an error that says which job may be queued: never a
        second submission beside one that may still land."""
        wait = int(SUBMIT_GONE_S * 10)
        try:
            done = self._run(_AWAIT, release.dir, comment, str(wait), timeout_s=SUBMIT_GONE_S + 60)
        except HostError as exc:
            raise ConnectionLost(
                f"{self.transport.name}: the connection was lost while sbatch ran ({lost.message}), and the login "
                f"node did not come back to say whether it submitted the job: {exc.message}",
                host=self.transport.name,
                fix=f"once it is back, `squeue --me -o '%i %k'` shows a job with the comment {comment} if one was "
                "submitted; `specctl stop` cancels it (it cancels itself once it runs, unless made current)",
            ) from None
        state, job = (done.stdout.split("\n") + ["", ""])[:2]
        if state.startswith("running"):
            raise HostError(
                f"{self.transport.name}: the connection was lost while sbatch ran ({lost.message}), and that sbatch "
                f"(pid {state.split()[-1]} on the login node) still runs {SUBMIT_GONE_S:.0f} s later: the job is "
                "not submitted again while it may yet be",
                host=self.transport.name,
                fix=f"`squeue --me -o '%i %k'` shows a job with the comment {comment} once it is submitted; "
                "`specctl stop` cancels it (it cancels itself once it runs, unless made current)",
            )
        job = job.strip()
        return int(job) if job.isdigit() else None

    def prove_start(self, release: rel.Release) -> list[str]:
        """`sbatch --test-only` of the release's job, as `start` would submit it: what the controller
        refuses (partition, account, qos, time, gres, nodes), submitting nothing."""
        done = self._run(_TEST_ONLY, release.dir, JOB_FILE, "0", timeout_s=90, check=False)
        said = done.stdout.strip()
        if done.rc == 0:
            return []
        return [f"sbatch --test-only refused the job: {said[-400:] or f'exit status {done.rc}'}"]

    def time_limit(self, release: rel.Release) -> str | None:
        """The running job's time limit and when it stops serving, as squeue says now (None: no job, or
        no limit)."""
        job = self._started.get(release.run_id, (None, 0))[0]
        if job is None:
            raw = self.transport.read(release.path(JOB_ID_FILE))
            job = int(raw.split()[0]) if raw and raw.split() and raw.split()[0].isdigit() else None
        if job is None:
            return None
        done = self._run(_CLEAN + "squeue -h -j \"$1\" -o '%l|%T|%L' 2>/dev/null | head -n 1; true", str(job))
        limit, _, rest = done.stdout.strip().partition("|")
        state, _, left = rest.partition("|")
        if _seconds(limit) is None:
            return None
        seconds = _seconds(left.strip())
        if state != "RUNNING" or seconds is None:
            return f"job {job}: time limit {limit}"
        at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + seconds))
        return f"job {job}: time limit {limit}, serving stops at {at}"

    def observe(self, release: rel.Release, handle: int) -> Observation:
        twins = self._cancel_twins(release, handle) if release.run_id in self._lost else ""
        done = self._run(_OBSERVE, str(handle), release.dir, "200")
        state_line, address, *lines = done.stdout.split("\n") + ["", ""]
        state, _, rest = state_line.partition("|")
        reason, _, nodes = rest.partition("|")
        lines = [line for line in lines if line]
        if state == "ended":
            self._secrets.pop(handle, None)
            return Observation(False, lines, None, ended=f"job {handle} ended: {reason}")
        if state == "unknown":
            return Observation(True, lines, None, waiting=f"job {handle}: squeue did not answer ({reason.strip()})")
        if state == "PENDING" and reason in NEVER_STARTS:
            return Observation(
                False, lines, None, ended=f"job {handle} can never start as submitted: pending ({reason})"
            )
        if state != "RUNNING":
            why = f" ({reason})" if reason and reason != "None" else ""
            return Observation(True, lines, None, waiting=f"job {handle} {state.lower()}{why}")
        waiting = self._feed(release, handle) or (None if address.strip() else f"job {handle} on {nodes}")
        return Observation(True, lines, address.strip() or None, waiting=waiting, notes=(twins,) if twins else ())

    def watchdog(self, release: rel.Release) -> bool:
        return False  # a job's own deadline loop runs in its batch step, out of the login node's sight

    def _cancel_twins(self, release: rel.Release, handle: int) -> str:
        """Cancel every other live job of the release (a submission whose reply was lost may yet have
        landed beside the one followed); what was cancelled, in words ("" for none)."""
        ids = [int(i) for i in self._run(_TWINS, f"{JOB_PREFIX}{release.run_id}:", str(handle)).stdout.split()]
        if not ids:
            return ""
        self._cancel(ids)
        return f"cancelled job(s) {', '.join(map(str, ids))} of release {release.run_id} beside job {handle}"

    def _feed(self, release: rel.Release, handle: int) -> str | None:
        """Hand a running job's steps their secrets (once); None once they have them, else what is awaited."""
        secrets = self._secrets.get(handle)
        if secrets is None:
            return None
        lines = [f"{k}={base64.b64encode(v.encode()).decode()}\n" for k, v in sorted(secrets.items())]
        exports = [f"{k}={v}" for k, v in sorted(self.cluster.env.items())]  # env= would take stdin (SSH)
        done = self.transport.run(
            ["env", *exports, "sh", "-c", _DELIVER, "sh", str(handle), release.dir],
            stdin=("".join(lines) + ".\n").encode(),
            timeout_s=90,
            check=False,
        )
        if done.rc == 0:
            del self._secrets[handle]
            return None
        return f"job {handle}: its secrets are not handed over yet ({(done.stderr or done.stdout).strip()[-200:]})"

    def address(self, release: rel.Release) -> str:
        raw = self.transport.read(release.path(HEAD_FILE))
        words = raw.decode().split() if raw else []
        if len(words) != 2:
            raise HostError(
                f"{self.transport.name}: release {release.run_id} has no head-node address: its job never ran",
                host=self.transport.name,
                fix="see `specctl status` and the job's log (`specctl logs`)",
            )
        return words[1]

    def endpoint(self, address: str, port: int) -> tuple[str, int]:
        return self.transport.forward(address, port) if self.cluster.tunnel else (address, port)

    def stop(self, release: rel.Release) -> bool:
        try:
            ids = [s.handle for s in self.servers(release.base) if s.release == release.run_id]
            self._cancel(ids)
        except ConnectionLost as lost:
            started = self._started.get(release.run_id)
            if started is None:
                raise
            job, confirm_s = started
            raise ConnectionLost(
                f"{lost.message}; job {job} of release {release.run_id} could not be cancelled: it cancels itself "
                f"{confirm_s} s after it started unless made current, and the job that served before was never "
                "stopped: it keeps serving",
                host=self.transport.name,
                fix="once the login node is back, `specctl status` shows both jobs and `specctl stop` or a new "
                "deploy tidies up",
            ) from None
        return bool(ids)

    def stop_running(self, root: str, profile: str, *, keep: str | None = None) -> list[str]:
        jobs = [s for s in self.servers(f"{root}/{profile}") if s.release != keep]
        self._cancel([s.handle for s in jobs])
        return sorted({s.release for s in jobs})

    def _cancel(self, ids: list[int], timeout_s: float = 120.0) -> None:
        if ids:
            self._run(_CANCEL, str(int(timeout_s * 10)), *map(str, ids), timeout_s=timeout_s + 30)

    def facts(self, release: rel.Release) -> Completed | None:
        raw = self.transport.read(release.path(FACTS_FILE))
        return Completed(0, raw, "") if raw is not None else None


def explain_end(job: int, answer: str) -> str:
    """A job's end in words, from what `_ENDED` printed: the controller's record, accounting's row, or neither."""
    source, _, rest = answer.strip().partition("|")
    if source == "scontrol":
        record = _pairs(rest)
        state, reason = record.get("JobState", "?"), record.get("Reason", "None")
        code, end = record.get("ExitCode", ""), record.get("EndTime", "")
    elif source == "sacct":
        state, code, end = (rest.split("|") + ["", ""])[:3]
        reason = "None"
    else:
        return f"job {job} ended; the controller no longer reports why"
    word = state.split()[0] if state else "?"  # sacct writes "CANCELLED by 1000"
    why = [_ENDINGS.get(word, "")] + ([f"reason {reason}"] if reason not in ("", "None") else [])
    why += [f"exit code {code}"] if code and code != "0:0" else []
    when = f" at {end}" if end and end not in ("Unknown", "None") else ""
    return f"job {job} ended{when}: {state}" + (f" ({'; '.join(w for w in why if w)})" if any(why) else "")


def with_time_limit(note: str | None, now: float) -> str | None:
    """A running job's squeue note ("RUNNING, 1:02:03 left") with when serving stops, flagged once that is
    within TIME_LIMIT_WARN_S."""
    state, _, left = (note or "").partition(", ")
    seconds = _seconds(left.removesuffix(" left"))
    if state != "RUNNING" or seconds is None:
        return note
    at = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now + seconds))
    if seconds <= TIME_LIMIT_WARN_S:
        return f"{note}; TIME LIMIT NEAR: serving stops at {at} (time limit)"
    return f"{note}; serving stops at {at} (time limit)"


def _seconds(left: str) -> int | None:
    """Slurm's time left ("[days-][hours:]minutes:seconds") in seconds; None when unlimited or unknown."""
    days, _, clock = left.rpartition("-") if "-" in left else ("0", "", left)
    parts = clock.split(":")
    if not days.isdigit() or not 2 <= len(parts) <= 3 or not all(p.isdigit() for p in parts):
        return None
    h, m, sec = ([0] * (3 - len(parts)) + [int(p) for p in parts])[:3]
    return int(days) * 86400 + h * 3600 + m * 60 + sec


def _secret_names(script: bytes) -> list[str]:
    """The secrets a job script's steps wait for, by name (its SECRETS_COMMENT line)."""
    for line in script.decode(errors="replace").splitlines():
        if line.startswith(SECRETS_COMMENT):
            return line.removeprefix(SECRETS_COMMENT).split()
    return []


def _pairs(record: str) -> dict[str, str]:
    """`scontrol show -o` Key=Value pairs (a value may hold spaces, e.g. Reason)."""
    pairs: dict[str, str] = {}
    key = None
    for token in record.split(" "):
        k, eq, v = token.partition("=")
        if eq and k and (k[0].isalpha()) and all(c.isalnum() or c in "_/:" for c in k):
            key = k
            pairs[k] = v
        elif key is not None:
            pairs[key] += " " + token
    return pairs


def job_settings(
    profile: Profile, distribution: str, cluster: SlurmCluster, release_dir: str, run_id: str, name: str
) -> JobSettings:
    """What a release's job asks of the cluster: the entry's site settings, GPUs from the profile
    (`name`: the release's profile, which names the job)."""
    gres = cluster.gres if cluster.gres is not None else f"gpu:{profile.hardware.gpus_per_node}"
    return JobSettings(
        release_dir,
        release_dir.rsplit("/releases/", 1)[0],
        run_id,
        name,
        cluster.partition,
        cluster.account,
        cluster.qos,
        cluster.time,
        gres,
        tuple(cluster.setup),
        tuple(cluster.sbatch_args),
        tuple(cluster.srun_args),
        cluster.python or profile.engine.python,
        profile.engine.port,
        distribution,
        cluster.exclusive,
    )


def job_files(
    p: Plan,
    profile: Profile,
    distribution: str,
    cluster: SlurmCluster,
    release_dir: str,
    run_id: str,
    name: str,
    hf_home: str | None = None,
) -> Files:
    """The files a Slurm release adds: `job.sbatch`, the facts script its first node runs, and the
    launch scripts of node ranks 1.. (rank 0's is `launch.sh`, as everywhere)."""
    job = job_settings(profile, distribution, cluster, release_dir, run_id, name)
    files: Files = {
        JOB_FILE: (render_sbatch(p, job).encode(), 0o755),
        FACTS_SCRIPT: (host_facts.script().encode(), 0o644),
    }
    for node in p.nodes[1:]:
        node = dataclasses.replace(node, env=host_env(node.env, hf_home)) if hf_home else node
        files[node_script(node.rank)] = (render_sh(p, node).encode(), 0o755)
    return files


def _prefix(base: str) -> str:
    """The job-name prefix of the profile whose directory is `base`."""
    return job_name(base.rsplit("/", 1)[-1], "")
