"""A real Slurm cluster for the tests: Debian's slurm-wlm (22.05) and MUNGE, started from scratch per
lab under one temporary directory and torn down with it.

What it is:
- one `munged` (its own key, socket, pid, seed and log files in the lab's directory: the system's
  /etc/munge and /run/munge are never used) and one `slurmctld`, both in a namespace of their own,
  the controller `slurmctl`;
- N `slurmd` nodes, `sn0`, `sn1`, ..., each in its OWN network namespace with its own address on a
  veth pair (as the SSH hosts of sshd.py), its own hostname (a UTS namespace: `hostname` in a job
  prints `sn0`) and its own /etc/hosts (a mount namespace: the lab's node names resolve on the
  nodes). A process a job starts on sn0 listens on sn0's address, reached from this machine's
  (root) namespace at that address. NodeAddr is that address, so a client maps a job's node list
  to addresses with `scontrol show hostnames` and `scontrol show node` (or `SlurmLab.node_address`);
- the client commands (sbatch, squeue, scontrol, scancel, srun, sinfo, sacct) run in the root
  namespace with `SLURM_CONF=<lab>/slurm.conf` (`lab.env`, `lab.run`); slurm.conf's
  `AuthInfo=socket=...` points them, and every daemon, at the lab's munged;
- the nodes share this machine's file system: that is the cluster's shared storage;
- every process of a lab lives in one of its namespaces (named `slab-<pid>-<k>-...`), so tear-down,
  and the clean-up of a lab whose run was killed, kill them all by namespace, job steps included.

What it cannot do:
- no cgroups: ProctrackType=proctrack/linuxproc (a job's processes are found by parentage),
  TaskPlugin=task/none (no binding, no memory limits);
- no real GPUs: each node declares `Gres=gpu:<gpus>` (default 2). gres/gpu drops GPUs that have no
  device file, so gres.conf names stand-ins, `<lab>/dev/gpu0..`, character devices with /dev/null's
  numbers: `--gres=gpu:N` is scheduled and counted and the job sees CUDA_VISIBLE_DEVICES=0,1,..., a
  request for more than a node has is refused at submission, but nothing is bound (task/none);
- no cgroups of its own, yet slurmd 22.05 will not start unless it detects a cgroup file system at
  /sys/fs/cgroup: the daemons therefore enter their network namespace with nsenter, keeping this
  machine's /sys (`ip netns exec` would mount a fresh sysfs without it);
- no slurmdbd: there is no accounting database, so plain `sacct` answers "accounting storage is
  disabled". Finished jobs are written by jobcomp/filetxt, which `sacct --completion` (`-c`) reads
  (one line per finished job: state, exit code, nodes, times; no steps). `scontrol show job` keeps
  a finished job for MinJobAge (10 minutes) and is the first source of final job states;
- all daemons run as root (SlurmUser=SlurmdUser=root) and every job runs as root.

Use (the fixtures `slurm_lab`, one lab for the session, and `slurm`, the same lab reset after each
test, are in conftest.py):

    lab = SlurmLab(tmp_dir, node_count=2)   # cpus=4, gpus=2, memory_mb=4096 per node, declared
    lab.start()                             # about half a second; lab.stop() undoes it all
    job = lab.sbatch("-N2", "--output=...", script="#!/bin/sh\nsrun hostname\n")
    lab.wait_job(job)["JobState"]           # "COMPLETED" (`scontrol show -o job`, as a dict)
    lab.run("squeue", "-h")                 # any client command, with lab.env (SLURM_CONF)
    lab.drain("sn1", "why"); lab.resume("sn1"); lab.wait_idle(); lab.reset()
    lab.node_address("sn0")                 # NodeAddr, from `scontrol show node`; lab.nodes["sn0"].address

Other details: Slurm's default ports (6817/6818) are used, each daemon in a network namespace of
its own, so nothing collides with this machine's; each node has a resolv.conf without a name server
(no DNS server is reachable there; a lookup the hosts file does not answer fails at once instead of
waiting 10 s); slurmd logs errors about the mpi/pmix plugins it cannot load at start-up (harmless:
MpiDefault=none); the daemons' logs are under `<lab>/log`.
"""

from __future__ import annotations

import atexit
import os
import re
import shutil
import signal
import stat
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.sshd import _run, namespaces_work, wire_namespace

__all__ = ["SlurmLab", "SlurmNode", "slurm_available", "slurm_missing", "namespaces_work"]

SLURMCTLD = "/usr/sbin/slurmctld"
SLURMD = "/usr/sbin/slurmd"
MUNGED = "/usr/sbin/munged"
CLIENTS = ("sbatch", "squeue", "scontrol", "scancel", "srun", "sinfo", "sacct")
NAMESPACE_PREFIX = "slab-"
CONTROLLER = "slurmctl"
SLURMCTLD_PORT = 6817  # each daemon has a network namespace of its own: Slurm's default ports never collide
SLURMD_PORT = 6818
FINISHED = frozenset(
    {"COMPLETED", "FAILED", "CANCELLED", "TIMEOUT", "NODE_FAIL", "OUT_OF_MEMORY", "PREEMPTED", "BOOT_FAIL", "DEADLINE"}
)

_labs_in_this_process = 0


def slurm_missing() -> list[str]:
    """The Slurm and MUNGE programs the lab needs that this machine lacks (`make system-deps` installs them)."""
    missing = [p for p in (SLURMCTLD, SLURMD, MUNGED) if not os.access(p, os.X_OK)]
    return missing + [c for c in CLIENTS if shutil.which(c) is None]


def slurm_available() -> bool:
    return not slurm_missing()


def _pid_alive(pid: int) -> bool:
    """A running process (a zombie, which an init that reaps slowly may keep for a while, is not)."""
    try:
        stat_line = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat_line.rsplit(")", 1)[-1].split()[0] not in ("Z", "X")


def _namespace_pids(namespace: str) -> list[int]:
    out = subprocess.run(["ip", "netns", "pids", namespace], capture_output=True, text=True).stdout
    return [int(p) for p in out.split()]


def _kill_namespace(namespace: str) -> None:
    """Every process inside the namespace (all of them the lab's), then the namespace and its links."""
    for _ in range(3):
        pids = _namespace_pids(namespace)
        if not pids:
            break
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)
    subprocess.run(["ip", "netns", "del", namespace], capture_output=True)


def remove_stale_labs() -> list[str]:
    """Namespaces (with every process in them) of labs whose test process is gone: a killed run's."""
    removed = []
    for line in subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout.splitlines():
        name = line.split()[0] if line.split() else ""
        m = re.fullmatch(rf"{NAMESPACE_PREFIX}(\d+)-\d+-[\w-]+", name)
        if m and not _pid_alive(int(m.group(1))):
            _kill_namespace(name)
            removed.append(name)
    return removed


@dataclass
class SlurmNode:
    """One namespaced machine of the lab: a compute node (`sn0`, ...) or the controller (`slurmctl`)."""

    name: str
    address: str  # in its namespace; NodeAddr in slurm.conf
    gateway: str  # this machine's address on the node's link
    namespace: str
    link: str  # the root namespace's end of the veth pair
    process: subprocess.Popen[bytes] | None = None  # slurmd (slurmctld for the controller)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


@dataclass
class SlurmLab:
    """A Slurm cluster of `node_count` slurmd nodes, one controller and one munged, under `workdir`.

    `start()` builds it (and tears down what it built if it fails half-way), `stop()` cancels every
    job, stops the daemons by pid and removes every namespace and link. `env` is the environment
    (this process's, less any SLURM_* of its own, plus SLURM_CONF) for the client commands;
    `run(*argv)` runs one with it.
    """

    workdir: Path
    node_count: int = 2
    cpus: int = 4  # per node, declared (SlurmdParameters=config_overrides: this machine may have fewer)
    gpus: int = 2  # per node, GRES gpu on stand-in device files; 0: no GRES at all
    memory_mb: int = 4096  # per node, declared
    nodes: dict[str, SlurmNode] = field(default_factory=dict, init=False)  # "sn0" -> its node, in order
    controller: SlurmNode | None = field(default=None, init=False)
    munged: subprocess.Popen[bytes] | None = field(default=None, init=False)
    octet: int | None = None  # the second octet of the lab's 10.x.y.0/24 subnets (chosen free when None)
    tag: str = field(default="", init=False)  # "<pid>-<k>": this process, its k-th lab

    def __post_init__(self) -> None:
        global _labs_in_this_process
        if not self.tag:
            self.tag = f"{os.getpid()}-{_labs_in_this_process}"
            _labs_in_this_process += 1
        assert self.node_count >= 1
        self.workdir = Path(self.workdir)

    # --- paths and environment ---------------------------------------------------------------

    @property
    def conf_path(self) -> Path:
        return self.workdir / "slurm.conf"

    @property
    def munge_socket(self) -> Path:
        return self.workdir / "munge" / "munge.socket"

    @property
    def jobcomp_path(self) -> Path:
        return self.workdir / "jobcomp.txt"

    @property
    def log_dir(self) -> Path:
        return self.workdir / "log"

    @property
    def shared_dir(self) -> Path:
        """A directory every node sees (the lab's shared storage; any path on this machine is)."""
        return self.workdir / "shared"

    @property
    def env(self) -> dict[str, str]:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("SLURM_", "SBATCH_", "SALLOC_", "SRUN_", "SQUEUE_", "SINFO_", "SACCT_", "SCONTROL_"))
        }
        return {**env, **self.client_env}

    @property
    def client_env(self) -> dict[str, str]:
        """Only what the client commands need beyond a plain environment (an inventory's `env:`)."""
        return {"SLURM_CONF": str(self.conf_path)}

    def run(
        self, *argv: str, check: bool = False, timeout: float = 30, input: str | None = None
    ) -> subprocess.CompletedProcess[str]:
        """A client command (`lab.run("squeue", "-h")`) in this machine's namespace, against the lab."""
        return subprocess.run(
            list(argv), env=self.env, capture_output=True, text=True, check=check, timeout=timeout, input=input
        )

    # --- start ---------------------------------------------------------------------------------

    def start(self) -> None:
        if not namespaces_work():
            raise RuntimeError("the Slurm lab needs root and network namespaces")
        if slurm_missing():
            raise RuntimeError(f"missing: {', '.join(slurm_missing())} (make system-deps installs slurm-wlm and munge)")
        atexit.register(self.stop)  # the last resort, should a teardown be cut short
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        remove_stale_labs()
        for sub in ("munge", "state", "spool", "run", "log", "shared"):
            (self.workdir / sub).mkdir(parents=True, exist_ok=True)
        os.chmod(self.workdir / "munge", 0o700)
        octet = self.octet if self.octet is not None else self._free_octet()
        self.octet = octet
        self.controller = self._namespace(CONTROLLER, f"10.{octet}.199", "c")
        for i in range(self.node_count):
            name = f"sn{i}"
            self.nodes[name] = self._namespace(name, f"10.{octet}.{200 + i}", f"n{i}")
        hosts = [
            "127.0.0.1 localhost",
            "::1 localhost ip6-localhost ip6-loopback",
            *(f"{n.address} {n.name}" for n in [self.controller, *self.nodes.values()]),
            "",
        ]
        (self.workdir / "hosts").write_text("\n".join(hosts))
        (self.workdir / "resolv.conf").write_text(
            "# the lab's machines: no name server (names come from hosts)\noptions timeout:1 attempts:1\n"
        )
        self._write_conf()
        self._start_munged()
        self._start_slurmctld()
        for node in self.nodes.values():
            self._start_slurmd(node)
        self.wait_idle(timeout=30)

    def _free_octet(self) -> int:
        """A 10.x.0.0/16 second octet none of whose lab subnets this machine already has (another lab's)."""
        used = subprocess.run(["ip", "-o", "-4", "addr", "show"], capture_output=True, text=True).stdout
        first = 100 + os.getpid() % 100
        for k in range(100):
            octet = 100 + (first - 100 + k) % 100
            if not any(f" 10.{octet}.{third}." in used for third in range(199, 200 + self.node_count)):
                return octet
        raise RuntimeError("no free 10.x subnet for the Slurm lab")

    def _namespace(self, name: str, subnet: str, short: str) -> SlurmNode:
        ns = f"{NAMESPACE_PREFIX}{self.tag}-{name}"
        link_base = f"sl{self.tag.replace('-', '')}{short}"
        outside, inside = f"{link_base}a", f"{link_base}b"
        assert len(outside) <= 15, f"interface name {outside!r} is too long"
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)  # a reused pid's leftovers
        subprocess.run(["ip", "link", "del", outside], capture_output=True)
        node = SlurmNode(name, f"{subnet}.2", f"{subnet}.1", ns, outside)
        _run("ip", "netns", "add", ns)
        if name == CONTROLLER:
            self.controller = node  # so that stop() removes it if what follows fails
        else:
            self.nodes[name] = node
        wire_namespace(
            ns, outside, inside, subnet
        )  # the nodes reach the controller and each other (srun's I/O, rendezvous)
        return node

    def _write_conf(self) -> None:
        assert self.controller is not None
        w = self.workdir
        lines = [
            "# written by tests/integration/slurm.py: a throw-away lab cluster",
            "ClusterName=speclab",
            f"SlurmctldHost={CONTROLLER}({self.controller.address})",
            f"SlurmctldPort={SLURMCTLD_PORT}",
            f"SlurmdPort={SLURMD_PORT}",
            "SlurmUser=root",
            "SlurmdUser=root",
            "AuthType=auth/munge",
            "CredType=cred/munge",
            f"AuthInfo=socket={self.munge_socket}",
            f"StateSaveLocation={w / 'state'}",
            f"SlurmdSpoolDir={w / 'spool' / '%n'}",
            f"SlurmctldPidFile={w / 'run' / 'slurmctld.pid'}",
            f"SlurmdPidFile={w / 'run' / 'slurmd-%n.pid'}",
            f"SlurmctldLogFile={self.log_dir / 'slurmctld.log'}",
            f"SlurmdLogFile={self.log_dir / 'slurmd-%n.log'}",
            "SlurmctldDebug=info",
            "SlurmdDebug=info",
            "ProctrackType=proctrack/linuxproc",
            "TaskPlugin=task/none",
            "JobAcctGatherType=jobacct_gather/none",
            "AccountingStorageType=accounting_storage/none",
            "JobCompType=jobcomp/filetxt",
            f"JobCompLoc={self.jobcomp_path}",
            "MpiDefault=none",
            "SwitchType=switch/none",
            "SchedulerType=sched/backfill",
            "SchedulerParameters=sched_interval=2,bf_interval=1",
            "SelectType=select/cons_tres",
            "SelectTypeParameters=CR_Core",
            "SlurmdParameters=config_overrides",
            "ReturnToService=2",
            "SlurmctldTimeout=10",
            "SlurmdTimeout=10",
            "MessageTimeout=5",
            "TCPTimeout=2",
            "InactiveLimit=0",
            "KillWait=2",
            "UnkillableStepTimeout=10",
            "Waittime=0",
            "MinJobAge=600",
            "HealthCheckInterval=0",
            "MailProg=/bin/true",
        ]
        gres = ""
        if self.gpus:
            lines.append("GresTypes=gpu")
            gres = f" Gres=gpu:{self.gpus}"
            # gres/gpu drops a GPU without a device file ("Removing file-less GPU"), so each node gets
            # `gpus` stand-ins: character devices with /dev/null's numbers (a plain file if mknod fails,
            # which Slurm still counts, logging that it is no device). Nothing binds them (task/none).
            (w / "dev").mkdir(exist_ok=True)
            for i in range(self.gpus):
                path = w / "dev" / f"gpu{i}"
                try:
                    os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
                except OSError:
                    path.touch()
            (w / "gres.conf").write_text(f"AutoDetect=off\nName=gpu File={w / 'dev'}/gpu[0-{self.gpus - 1}]\n")
        for node in self.nodes.values():
            lines.append(
                f"NodeName={node.name} NodeAddr={node.address} NodeHostname={node.name} CPUs={self.cpus} "
                f"RealMemory={self.memory_mb}{gres} State=UNKNOWN"
            )
        lines += [f"PartitionName=lab Nodes={','.join(self.nodes)} Default=YES MaxTime=INFINITE State=UP", ""]
        self.conf_path.write_text("\n".join(lines))

    def _in_namespace(self, node: SlurmNode, argv: list[str], out: str) -> subprocess.Popen[bytes]:
        """`argv` inside the node's namespaces: its network, its hostname, its /etc/hosts."""
        # nsenter, not `ip netns exec`: that one mounts a sysfs of the namespace's own over /sys, which
        # hides /sys/fs/cgroup, and slurmd 22.05 will not start without a cgroup file system to detect
        # (it uses none of it: proctrack/linuxproc, task/none, jobacct_gather/none)
        # and a resolv.conf without name servers: no DNS server is reached from a namespace, and a
        # lookup the lab's hosts file does not answer (getent's IPv6 one first) would wait 10 s for one
        script = (
            'hostname "$1" && mount --bind "$2" /etc/hosts && { [ ! -e /etc/resolv.conf ] || '
            'mount --bind "$3" /etc/resolv.conf; } || exit 1; shift 3; exec "$@"'
        )
        full = [
            "nsenter",
            f"--net=/run/netns/{node.namespace}",
            "unshare",
            "--uts",
            "--mount",
            "--propagation",
            "private",
            "sh",
            "-c",
            script,
            "sh",
            node.name,
            str(self.workdir / "hosts"),
            str(self.workdir / "resolv.conf"),
            *argv,
        ]
        with open(self.log_dir / out, "ab") as log:
            return subprocess.Popen(
                full,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )

    def _start_munged(self) -> None:
        assert self.controller is not None
        d = self.workdir / "munge"
        key = d / "munge.key"
        key.write_bytes(os.urandom(1024))
        os.chmod(key, 0o400)
        argv = [
            MUNGED,
            "--foreground",
            "--force",
            f"--key-file={key}",
            f"--socket={self.munge_socket}",
            f"--pid-file={d / 'munged.pid'}",
            f"--seed-file={d / 'munged.seed'}",
            f"--log-file={self.log_dir / 'munged.log'}",
            "--num-threads=2",
        ]
        self.munged = self._in_namespace(self.controller, argv, "munged.out")
        self._wait(lambda: self.munge_socket.exists(), self.munged, "munged", timeout=10)

    def _start_slurmctld(self) -> None:
        assert self.controller is not None
        self.controller.process = self._in_namespace(
            self.controller, [SLURMCTLD, "-D", "-f", str(self.conf_path)], "slurmctld.out"
        )
        self._wait(
            lambda: "UP" in self.run("scontrol", "ping", timeout=10).stdout,
            self.controller.process,
            "slurmctld",
            timeout=20,
        )

    def _start_slurmd(self, node: SlurmNode) -> None:
        (self.workdir / "spool" / node.name).mkdir(exist_ok=True)
        node.process = self._in_namespace(
            node, [SLURMD, "-D", "-N", node.name, "-f", str(self.conf_path)], f"slurmd-{node.name}.out"
        )

    def _wait(
        self, ready: Callable[[], bool], process: subprocess.Popen[bytes] | None, what: str, timeout: float
    ) -> None:
        deadline = time.monotonic() + timeout
        while not ready():
            if process is not None and process.poll() is not None:
                raise RuntimeError(f"{what} exited ({process.returncode}): {self._log_tail(what)}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} not ready after {timeout:.0f} s: {self._log_tail(what)}")
            time.sleep(0.1)

    def _log_tail(self, what: str) -> str:
        text = ""
        for path in sorted(self.log_dir.glob(f"{what.split()[0]}*")):
            text += f"\n--- {path.name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-15:])
        return text

    # --- the cluster's state --------------------------------------------------------------------

    def node_states(self) -> dict[str, str]:
        """Node name -> Slurm's long state (`idle`, `allocated`, `drained`, `mixed`, `down*`, ...)."""
        out = self.run("sinfo", "-h", "-N", "-o", "%N %T", check=True).stdout
        return dict(line.split(None, 1) for line in out.splitlines() if line.strip())

    def wait_idle(self, timeout: float = 30) -> None:
        """Until every node is up and idle (no job on it, none draining) and no job is running."""

        def idle() -> bool:
            states = self.node_states()
            return (
                len(states) == len(self.nodes)
                and all(s == "idle" for s in states.values())
                and not self.run("squeue", "-h", "-t", "RUNNING,COMPLETING,CONFIGURING", "-o", "%i").stdout.strip()
            )

        deadline = time.monotonic() + timeout
        while not idle():
            for node in self.nodes.values():
                if node.process is not None and node.process.poll() is not None:
                    raise RuntimeError(f"slurmd {node.name} exited: {self._log_tail(f'slurmd-{node.name}')}")
            if time.monotonic() > deadline:
                raise RuntimeError(f"nodes not idle after {timeout:.0f} s: {self.node_states()}")
            time.sleep(0.1)

    def drain(self, node: str, reason: str = "lab") -> None:
        self.run("scontrol", "update", f"NodeName={node}", "State=DRAIN", f"Reason={reason}", check=True)

    def resume(self, node: str) -> None:
        self.run("scontrol", "update", f"NodeName={node}", "State=RESUME", check=True)

    def node_address(self, node: str) -> str:
        """Where a node is reached, as Slurm itself says (`scontrol show node` -> NodeAddr)."""
        return self.show("node", node)["NodeAddr"]

    def hostnames(self, nodelist: str) -> list[str]:
        """A node list (`sn[0-1]`) expanded, by `scontrol show hostnames`."""
        return self.run("scontrol", "show", "hostnames", nodelist, check=True).stdout.split()

    def show(self, kind: str, name: str) -> dict[str, str]:
        """`scontrol show -o <kind> <name>` as a dict (Key=Value pairs; a value may hold spaces, e.g. Reason)."""
        out = self.run("scontrol", "show", "-o", kind, name, check=True).stdout.strip()
        pairs: dict[str, str] = {}
        key = None
        for token in out.split(" "):
            k, eq, v = token.partition("=")
            if eq and re.fullmatch(r"[A-Za-z][\w/:]*", k):
                key = k
                pairs[k] = v
            elif key is not None:
                pairs[key] += " " + token
        return pairs

    def sbatch(self, *args: str, script: str) -> str:
        """Submits `script` (its text) with sbatch's `args`; the job id."""
        out = self.run("sbatch", "--parsable", *args, input=script, check=True).stdout.strip()
        return out.split(";")[0]

    def job(self, job_id: str) -> dict[str, str]:
        return self.show("job", job_id)

    def wait_job(
        self, job_id: str, states: frozenset[str] | set[str] = FINISHED, timeout: float = 30
    ) -> dict[str, str]:
        """Until the job's JobState is one of `states` (by default: any final state); its record."""
        deadline = time.monotonic() + timeout
        while True:
            job = self.job(job_id)
            if job.get("JobState") in states:
                return job
            if time.monotonic() > deadline:
                raise TimeoutError(f"job {job_id} is {job.get('JobState')} ({job.get('Reason')}) after {timeout:.0f} s")
            time.sleep(0.1)

    def cancel_all(self, timeout: float = 15) -> None:
        """Every job cancelled, and waited for until none runs or completes any more."""
        ids = self.run("squeue", "-h", "-o", "%i").stdout.split()
        if not ids:
            return
        self.run("scancel", *ids)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not self.run("squeue", "-h", "-o", "%i").stdout.split():
                return
            time.sleep(0.1)

    def reset(self, timeout: float = 30) -> None:
        """What a test leaves, undone: every job cancelled, every node resumed, all idle again."""
        self.cancel_all()
        for name, state in self.node_states().items():
            if "drain" in state or state.startswith(("down", "inval", "fail")):
                self.resume(name)
        self.wait_idle(timeout)

    # --- stop ------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Jobs cancelled, the daemons stopped by pid, every process left in the lab's namespaces
        killed (job steps included; the mounts of a machine live in its daemon's mount namespace and
        go with them), the namespaces and links removed. Safe after a failed start, and to call again
        (start() registers it with atexit, the last resort should a teardown be cut short)."""
        if self.controller is not None and self.controller.alive():
            try:
                self.cancel_all()
            except (subprocess.SubprocessError, OSError):
                pass
        daemons = [n.process for n in self.nodes.values()]
        daemons += [self.controller.process if self.controller else None, self.munged]
        for proc in daemons:
            if proc is not None and proc.poll() is None:
                proc.terminate()
        for proc in daemons:
            if proc is not None:
                try:
                    proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    proc.kill()  # and, should it still not go, with its namespace below
                    try:
                        proc.wait(timeout=5)
                    except subprocess.TimeoutExpired:
                        pass
        machines = [*self.nodes.values(), *([self.controller] if self.controller else [])]
        for node in machines:
            _kill_namespace(node.namespace)
            subprocess.run(["ip", "link", "del", node.link], capture_output=True)
        atexit.unregister(self.stop)
