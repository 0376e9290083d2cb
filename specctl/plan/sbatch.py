"""A Plan as a Slurm batch script: one job, one `srun` step, one task per node.

Each task runs its node's launch script from the release directory (on storage every node mounts):
node rank = `SLURM_NODEID`, so rank 0's `launch.sh` on the first node of the allocation and
`launch-<rank>.sh` on the others. The ranks meet at the first node of `SLURM_JOB_NODELIST`, whose
address (its `NodeAddr`) the job finds and hands to the launch scripts as `SPECCTL_HEAD_ADDRESS`
and writes to `head-address`, where specctl reads where to send HTTP.

Secrets (the profile's `secrets:`) are in no file and in no environment the controller keeps: each
node's step makes a named pipe in the release directory, `secrets-<job id>-<node>.fifo` (mode 0600;
a pipe holds nothing on disk, and a node's pipe is its own kernel's even on NFS), and waits up to
SECRETS_WAIT_S for specctl to write "NAME=base64(value)" lines and a closing "." into it, from a step
of its own that specctl runs with `srun --overlap` on the login node, the values on that step's
standard input over specctl's own connection (release/slurm.py). The step exports them and runs its
launch script. The price: a job that Slurm starts again by itself (requeued after a node failure)
waits for secrets no one sends, and fails; specctl's next deploy or rollback starts a new one.

The job watches its own confirmation as the SSH path's watchdog does: unless `current` names this
release by the deadline (the script's first argument, seconds), it cancels itself, so a deploy that
lost the login node leaves no job holding GPUs.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from specctl.constants import HEAD_ADDRESS_VAR, RELEASE_DIR_VAR
from specctl.plan.plan import Plan

__all__ = [
    "FACTS_FILE",
    "FACTS_SCRIPT",
    "HEAD_FILE",
    "JOB_FILE",
    "JobSettings",
    "job_name",
    "node_script",
    "render_sbatch",
    "sbatch_options",
]

JOB_FILE = "job.sbatch"
HEAD_FILE = "head-address"
FACTS_FILE = "allocation-facts.txt"
FACTS_SCRIPT = "facts.sh"
JOB_PREFIX = "specctl:"
# the job script's line that names the secrets its steps wait for (and the mark specctl looks for)
SECRETS_COMMENT = "# secrets, fed to each node's step by specctl, never written here:"
SECRETS_WAIT_S = 10 * 60  # how long a node's step waits for its secrets before it fails
# a node's named pipe for its secrets, as the steps (run from the release directory) spell it
SECRETS_FIFO = 'secrets-"$SLURM_JOB_ID-$SLURMD_NODENAME".fifo'


@dataclass(frozen=True)
class JobSettings:
    """What the site decides (the inventory's cluster entry) plus where the release lives."""

    release_dir: str
    profile_dir: str
    run_id: str
    profile: str  # the release's profile (a baseline's is `<name>-baseline`): the job's name
    partition: str | None = None
    account: str | None = None
    qos: str | None = None
    time: str | None = None
    gres: str | None = None
    setup: Sequence[str] = ()
    sbatch_args: Sequence[str] = ()
    srun_args: Sequence[str] = ()
    python: str = "python3"
    port: int = 30000
    distribution: str = "sglang"
    exclusive: bool = True  # whole nodes (all their CPUs and memory): a serving engine is no small job


def job_name(profile: str, run_id: str) -> str:
    """The job's name: how specctl finds a profile's jobs in `squeue` (and which release each runs)."""
    return f"{JOB_PREFIX}{profile}:{run_id}"


def node_script(rank: int) -> str:
    """The launch script a node rank runs, inside the release directory."""
    return "launch.sh" if rank == 0 else f"launch-{rank}.sh"


def sbatch_options(plan: Plan, job: JobSettings) -> list[str]:
    """The job's sbatch options, as its #SBATCH lines carry them."""
    options = [
        f"--job-name={job_name(job.profile, job.run_id)}",
        f"--nodes={len(plan.nodes)}",
        "--ntasks-per-node=1",
        f"--output={job.release_dir}/server.log",
        "--open-mode=append",
        f"--chdir={job.release_dir}",
    ]
    options += ["--exclusive", "--mem=0"] if job.exclusive else []
    options += [
        f"--{flag}={value}"
        for flag, value in (
            ("partition", job.partition),
            ("account", job.account),
            ("qos", job.qos),
            ("time", job.time),
            ("gres", job.gres),
        )
        if value
    ]
    return options + list(job.sbatch_args)


def render_sbatch(plan: Plan, job: JobSettings) -> str:
    """The batch script of a release; deterministic, every site value shell-quoted."""
    nodes = len(plan.nodes)
    q = shlex.quote
    options = sbatch_options(plan, job)
    kind = "baseline (no speculation)" if plan.baseline else "speculative"
    facts = (
        f"sh {FACTS_SCRIPT} {q(job.python)} {q(job.release_dir)} {job.port} {q(job.distribution)} "
        f">{FACTS_FILE}.tmp 2>/dev/null; mv -f {FACTS_FILE}.tmp {FACTS_FILE}"
    )
    # in the step (a container's view, when srun_args name one): rank 0 reads its machine's facts, then
    # every rank execs its own launch script
    step = f'if [ "$SLURM_NODEID" = 0 ]; then {facts}; exec sh launch.sh; else exec sh "launch-$SLURM_NODEID.sh"; fi'
    step = _secrets_read() + step if plan.secrets else step
    # from the release directory: a container starts in its image's WORKDIR (pyxis does), not the job's
    step = f"cd {q(job.release_dir)} || exit 1; " + step
    lines = [
        "#!/bin/sh",
        *(f"#SBATCH {q(option)}" for option in options),
        f"# specctl job script: profile {plan.profile} v{plan.version}, {nodes} node(s), {kind}, release {job.run_id}",
        f"# profile sha256 {plan.sha256}",
        *([f"{SECRETS_COMMENT} {' '.join(plan.secrets)}"] if plan.secrets else []),
        'echo "specctl: job $SLURM_JOB_ID started on $SLURM_JOB_NODELIST"',  # where this job's log begins
        "confirm_s=${1:-0}",
        *job.setup,
        "set -u",
        f"export {RELEASE_DIR_VAR}={q(job.release_dir)}",
        'cd "$SPECCTL_RELEASE_DIR" || exit 1',
        # the first node of the allocation is node rank 0; its NodeAddr is where the ranks meet
        'head=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -n 1)',
        'addr=$(scontrol show node "$head" -o 2>/dev/null | tr " " "\\n" | sed -n "s/^NodeAddr=//p")',
        f'export {HEAD_ADDRESS_VAR}="${{addr:-$head}}"',
        f'printf "%s %s\\n" "$SLURM_JOB_ID" "${HEAD_ADDRESS_VAR}" >{HEAD_FILE}.tmp '
        f"&& mv -f {HEAD_FILE}.tmp {HEAD_FILE}",
        *_confirm_watch(job),
        # srun does not inherit the batch step's CPUs (22.05): give each rank its node's, the fewest of any node
        'cpus=$(echo "${SLURM_JOB_CPUS_PER_NODE:-1}" | tr "," "\\n" | sed "s/(.*//" | sort -n | head -n 1)',
        "srun --kill-on-bad-exit=1 --ntasks="
        + str(nodes)
        + ' --ntasks-per-node=1 --cpus-per-task="$cpus" '
        + "".join(q(arg) + " " for arg in job.srun_args)
        + "sh -c "
        + q(step),
    ]
    return "\n".join(lines) + "\n"


def _secrets_read() -> str:
    """The start of each node's step: its secrets read from its own named pipe, checked whole (the
    closing "." line) and exported; never put in an argument, a file or the controller's records."""
    return (
        f'f={SECRETS_FIFO}; rm -f "$f"; mkfifo -m 600 "$f" || exit 1; '
        f'got=$(timeout {SECRETS_WAIT_S} cat "$f"); rm -f "$f"; '
        'if [ "$(printf "%s\\n" "$got" | tail -n 1)" != . ]; then '
        f'echo "specctl: no secrets came to $SLURMD_NODENAME within {SECRETS_WAIT_S} s (specctl feeds them while '
        'it starts the job; a job Slurm restarted by itself gets none)" >&2; exit 1; fi; '
        "set -f; IFS='\n'; for line in $got; do [ \"$line\" = . ] && continue; "
        'value=$(printf %s "${line#*=}" | base64 -d) || exit 1; export "${line%%=*}=$value"; done; '
        "unset got line value; IFS=' \t\n'; set +f; "
    )


def _confirm_watch(job: JobSettings) -> list[str]:
    """A background loop: the job cancels itself unless `current` names its release by the deadline."""
    body = (
        f"base={shlex.quote(job.profile_dir)}; id={shlex.quote(job.run_id)}; until=$(( $(date +%s) + confirm_s )); "
        'while :; do case $(readlink "$base/current" 2>/dev/null) in */"$id") exit 0;; esac; '
        'if [ "$(date +%s)" -ge "$until" ]; then '
        'echo "specctl: release $id was not made current by its deadline: cancelling job $SLURM_JOB_ID"; '
        'scancel "$SLURM_JOB_ID"; exit 0; fi; sleep 1; done'
    )
    return [f'if [ "$confirm_s" -gt 0 ]; then ( {body} ) & fi']
