"""Releases as Slurm jobs: submitted from the login node, followed in `squeue`, stopped with `scancel`.

The release directory sits on storage every node mounts; its `job.sbatch` (plan/sbatch.py) is the
job. A job is named `specctl:<profile>:<run id>`, so `squeue` alone says which releases of a
profile hold an allocation, and the job writes its head node's address into the release, so verify
and status know where to send HTTP. Each poll is one round trip to the login node.

Slurm keeps the environment of `sbatch` with the job (`--export=ALL` is its default): secrets reach
the servers that way, and so they sit in the controller's job state for the job's lifetime, readable
by the cluster's administrators. Use a site secret store where that is not acceptable.
"""

from __future__ import annotations

from collections.abc import Mapping

from specctl.errors import HostError
from specctl.hosts.transport import Completed, Transport
from specctl.plan.sbatch import FACTS_FILE, HEAD_FILE, JOB_FILE, job_name
from specctl.profile.inventory import SlurmCluster
from specctl.release import release as rel
from specctl.release.target import Observation

__all__ = ["SlurmTarget"]

# The jobs of one profile that hold or wait for an allocation, one "run-id job-id" line each.
# $1 = the profile's job-name prefix.
_JOBS = r"""
jobs_of() {
  squeue -h -o '%i %j %T' 2>/dev/null | while read -r id name state; do
    case $name in "$1"*) ;; *) continue;; esac
    case " PENDING CONFIGURING RUNNING RESIZING SUSPENDED REQUEUED STOPPED " in *" $state "*) ;; *) continue;; esac
    echo "${name#"$1"} $id"
  done
}
"""
# survey: half-written releases swept, `current`, then the profile's jobs. $1 = profile dir, $2 = job-name prefix.
_SURVEY = _JOBS + r"""
for d in "$1"/releases/*.part.*; do [ -d "$d" ] && rm -rf "$d"; done
readlink "$1/current" 2>/dev/null || echo
jobs_of "$2" | sort -u
"""
# one start-up poll: "state|reason|nodes" (or "ended|<final state>|" once squeue no longer lists
# the job), the head node's address (or an empty line), then the log's tail.
# $1 job id, $2 release dir, $3 lines.
_OBSERVE = r"""
line=$(squeue -h -j "$1" -o '%T|%r|%N' 2>/dev/null | head -n 1)
if [ -z "$line" ]; then
  final=$(scontrol show job "$1" -o 2>/dev/null | tr ' ' '\n' | sed -n 's/^JobState=//p')
  line="ended|${final:-gone}|"
fi
echo "$line"
cat "$2/head-address" 2>/dev/null || echo
tail -n "$3" "$2/server.log" 2>/dev/null; true
"""
# cancel jobs, then wait (on the login node) until squeue lists none of them. $1 = tenths of seconds, $@ ids.
_CANCEL = r"""
limit=$1; shift
[ $# -gt 0 ] || exit 0
scancel "$@"
i=0
while [ $i -lt "$limit" ]; do
  left=$(squeue -h -j "$(echo "$@" | tr ' ' ',')" -o '%T' 2>/dev/null | grep -c .)
  [ "$left" = 0 ] && exit 0
  sleep 0.2; i=$((i+2))
done
echo "still listed after scancel: $*" >&2; exit 1
"""


class SlurmTarget:
    """The servers of a cluster entry: jobs submitted, watched and cancelled through its login node."""

    kind = "slurm"
    rolling = True
    on_host = False

    def __init__(self, transport: Transport, cluster: SlurmCluster) -> None:
        self.transport = transport
        self.cluster = cluster

    def _run(self, script: str, *args: str, timeout_s: float = 60.0, env: Mapping[str, str] | None = None,
             check: bool = True) -> Completed:
        return self.transport.run(["sh", "-c", script, "sh", *args], env={**self.cluster.env, **(env or {})} or None,
                                  timeout_s=timeout_s, retry=env is None, check=check)

    def survey_command(self, base: str) -> list[str]:
        exports = [f"{k}={v}" for k, v in sorted(self.cluster.env.items())]
        return ["env", *exports, "sh", "-c", _SURVEY, "sh", base, _prefix(base)]

    def servers(self, base: str) -> list[rel.Server]:
        done = self._run(_JOBS + 'jobs_of "$1" | sort -u', _prefix(base))
        return rel.read_survey(Completed(0, b"\n" + done.out, "")).servers

    def start(self, release: rel.Release, *, confirm_within_s: float, env: Mapping[str, str] | None = None) -> int:
        argv = ["sh", "-c", 'cd "$1" && shift && exec sbatch --parsable "$@"', "sh", release.dir, JOB_FILE,
                str(int(confirm_within_s))]
        done = self.transport.run(argv, env={**self.cluster.env, **(env or {})}, timeout_s=120, check=False)
        first = done.stdout.strip().split(";")[0]
        if done.rc != 0 or not first.isdigit():
            raise HostError(f"{self.transport.name}: sbatch refused the job: {(done.stderr or done.stdout).strip()[-400:]}",
                            host=self.transport.name,
                            fix="check the cluster entry (partition, account, qos, time, gres) against `sinfo` and your allocation")
        return int(first)

    def observe(self, release: rel.Release, handle: int) -> Observation:
        done = self._run(_OBSERVE, str(handle), release.dir, "200")
        state_line, address, *lines = done.stdout.split("\n") + ["", ""]
        state, _, rest = state_line.partition("|")
        reason, _, nodes = rest.partition("|")
        lines = [line for line in lines if line] if lines else []
        if state == "ended":
            return Observation(False, lines, None, ended=f"job {handle} ended: {reason}")
        if state != "RUNNING":
            why = f" ({reason})" if reason and reason != "None" else ""
            return Observation(True, lines, None, waiting=f"job {handle} {state.lower()}{why}")
        return Observation(True, lines, address.strip() or None, waiting=None if address.strip() else f"job {handle} on {nodes}")

    def address(self, release: rel.Release) -> str:
        raw = self.transport.read(release.path(HEAD_FILE))
        if not raw or not raw.strip():
            raise HostError(f"{self.transport.name}: release {release.run_id} has no head-node address: its job never ran",
                            host=self.transport.name, fix="see `specctl status` and the job's log (`specctl logs`)")
        return raw.decode().strip()

    def stop(self, release: rel.Release) -> bool:
        ids = [s.handle for s in self.servers(release.base) if s.release == release.run_id]
        self._cancel(ids)
        return bool(ids)

    def stop_running(self, root: str, profile: str, *, keep: str | None = None) -> list[str]:
        jobs = [s for s in self.servers(f"{root}/{profile}") if s.release != keep]
        self._cancel([s.handle for s in jobs])
        return sorted({s.release for s in jobs})

    def _cancel(self, ids: list[int], timeout_s: float = 60.0) -> None:
        if ids:
            self._run(_CANCEL, str(int(timeout_s * 10)), *map(str, ids), timeout_s=timeout_s + 30)

    def facts(self, release: rel.Release) -> Completed | None:
        raw = self.transport.read(release.path(FACTS_FILE))
        return Completed(0, raw, "") if raw is not None else None


def _prefix(base: str) -> str:
    """The job-name prefix of the profile whose directory is `base`."""
    return job_name(base.rsplit("/", 1)[-1], "")
