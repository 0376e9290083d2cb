"""A deploy of one release to 1, 4 and 8 hosts, each reached over SSH through 50 ms of added latency
(a delaying proxy: the kernel here has no netem), in one run. Needs root (network namespaces).

Two figures. "full": each host runs the reference engine with the tiny models and the deploy
verifies it; on this 2-core machine the engines' start-ups and verify requests compete for the CPU.
"orchestration": each host runs a stand-in server that answers a generation at once and costs
nothing to start, and the deploy does not verify: what is left is specctl's own work (lock,
survey, facts, release transfer, stop, start, readiness polls, switch, the run's copy). The
proxies run in their own process, as the network would: they do not share specctl's interpreter.
The lab's hosts each have a login-shell start-up file of their own (a real fleet does not share one
home directory; this machine's root ~/.bashrc runs a pyenv init that takes one lock in one ~/.pyenv).

With --host-cpu F every host (its sshd and all it starts: shells, the server) runs in a CPU cgroup
of its own capped at F of a core, the same cap whether one host deploys or eight, so eight hosts
no longer compete with each other for this machine's cores as a fleet's machines never do; what
is left to scale is specctl's own work, which shares the rest of the machine.

    sudo SPECCTL_LEDGER=/tmp/bench.db .venv/bin/python benchmarks/deploy_scaling.py [--latency-ms 50]
        [--host-cpu 0.15] [--only orchestration]
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
import os
import resource
import sys
import threading
import tempfile
import time
from multiprocessing.connection import Connection
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from specctl.cli.app import main as specctl  # noqa: E402
from specctl.flows.demo import write_inputs  # noqa: E402
from tests.integration.proxy import DelayProxy  # noqa: E402
from tests.integration.sshd import SshLab, namespaces_work  # noqa: E402


def _serve_proxy(upstream: tuple[str, int], delay_s: float, conn: Connection) -> None:
    proxy = DelayProxy(upstream, delay_s)
    conn.send(proxy.port)
    threading.Event().wait()


CPU_CGROUPS = Path("/sys/fs/cgroup/cpu")  # cgroup v1's cpu controller, as this machine mounts it


class HostQuota:
    """One cgroup per host, capped at a fraction of a core; the host's sshd joins it, and every
    process that sshd starts inherits it."""

    def __init__(self, name: str, fraction: float) -> None:
        self.path = CPU_CGROUPS / f"specctl-bench-{name}-{os.getpid()}"
        self.path.mkdir()
        period = int((self.path / "cpu.cfs_period_us").read_text())
        (self.path / "cpu.cfs_quota_us").write_text(str(int(period * fraction)))

    def join(self, pid: int) -> None:
        (self.path / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for _ in range(50):  # the processes are being killed; the group can go once they are gone
            try:
                self.path.rmdir()
                return
            except OSError:
                time.sleep(0.1)


def _proxy_process(upstream: tuple[str, int], delay_s: float) -> tuple[int, multiprocessing.Process]:
    """A delaying proxy in a process of its own; returns its port."""
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=_serve_proxy, args=(upstream, delay_s, child), daemon=True)
    process.start()
    return int(parent.recv()), process


def delayed_fleet(lab: SshLab, work: Path, latency_ms: float) -> list[multiprocessing.Process]:
    """Every lab host reached through a delaying proxy of its own: writes work/ssh_config, work/known
    and work/hosts.yaml (the hosts' servers reached at their own addresses); returns the proxies."""
    config, known = lab.ssh_config.read_text(), lab.known_hosts.read_text()
    lines = ["apiVersion: specctl/v1", "kind: Inventory", "hosts:"]
    proxies: list[multiprocessing.Process] = []
    for host in lab.hosts.values():
        proxy_port, process = _proxy_process((host.address, host.port), latency_ms / 1000)
        proxies.append(process)
        config = config.replace(f"HostName {host.address}\n  Port {host.port}", f"HostName 127.0.0.1\n  Port {proxy_port}")
        known += f"[127.0.0.1]:{proxy_port} ssh-ed25519 {host.host_key_pub}\n"
        lines += [f"  {host.name}:", f"    ssh: {host.name}", f"    root: {host.root}", f"    address: {host.address}"]
    (work / "known").write_text(known)
    (work / "ssh_config").write_text(config.replace(str(lab.known_hosts), str(work / "known")))
    (work / "hosts.yaml").write_text("\n".join(lines) + "\n")
    return proxies


# answers every request at once: /health_generate 200, so readiness is the first poll
STAND_IN = """#!{python}
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
class Answer(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()
    do_POST = do_GET
    def log_message(self, *args):
        pass
print("The server is fired up and ready to roll!", flush=True)
ThreadingHTTPServer(("0.0.0.0", port), Answer).serve_forever()
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--host-cpu", type=float, default=None, help="cap every host at this fraction of a core")
    parser.add_argument("--only", choices=("full", "orchestration"), default=None)
    args = parser.parse_args()
    if not namespaces_work():
        print("needs root and network namespaces")
        return 2
    work = Path(tempfile.mkdtemp())
    lab = SshLab(work / "lab", True)
    proxies: list[multiprocessing.Process] = []
    quotas: list[HostQuota] = []
    try:
        lab.start(8)
        if args.host_cpu is not None:
            for host in lab.hosts.values():
                quotas.append(HostQuota(host.name, args.host_cpu))
                assert host.process is not None
                quotas[-1].join(host.process.pid)
        proxies += delayed_fleet(lab, work, args.latency_ms)
        v1, _ = write_inputs(work, 31700)
        data = yaml.safe_load(v1.read_text())
        data["engine"]["host"] = "0.0.0.0"
        v1.write_text(yaml.safe_dump(data, sort_keys=False))
        stand_in = work / "stand-in"
        stand_in.write_text(STAND_IN.format(python=sys.executable))
        stand_in.chmod(0o755)
        light = v1.parent / "stand-in.yaml"
        light.write_text(yaml.safe_dump({"apiVersion": "specctl/v1", "kind": "Profile", "extends": v1.name,
                                         "metadata": {"name": "tiny-llama-demo", "version": 9}, "engine": {"python": str(stand_in)}}))
        common = ["--inventory", str(work / "hosts.yaml"), "--ssh-config", str(work / "ssh_config")]
        results: dict[tuple[str, int], tuple[float, float, int]] = {}
        cpu: dict[tuple[str, int], float] = {}
        figures = (("full", v1, []), ("orchestration", light, ["--no-verify"]))
        for label, profile, extra in [f for f in figures if args.only in (None, f[0])]:
            for count in (1, 4, 8):
                hosts = ",".join(f"h{i}" for i in range(count))
                out = io.StringIO()
                before = resource.getrusage(resource.RUSAGE_SELF)
                start = time.perf_counter()
                code = specctl(["--json", "deploy", str(profile), "--hosts", hosts, *extra, *common], stdout=out, stderr=io.StringIO())
                wall = time.perf_counter() - start
                after = resource.getrusage(resource.RUSAGE_SELF)  # specctl's own CPU: hosts and proxies are other processes
                cpu[(label, count)] = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
                rows = json.loads(out.getvalue())["hosts"]
                ready = max(float(r["detail"].split("ready in ")[1].split(" s")[0]) for r in rows if r["ok"])
                results[(label, count)] = (wall, ready, code)
                specctl(["stop", str(v1), "--hosts", hosts, *common], stdout=io.StringIO(), stderr=io.StringIO())
        cap = f", every host capped at {args.host_cpu} of a core" if args.host_cpu is not None else ""
        print(f"added latency {args.latency_ms:.0f} ms each way on every host's SSH{cap}")
        for (label, count), (wall, ready, code) in results.items():
            base = results[(label, 1)][0]
            print(f"{label:<13} {count} host(s): {wall:6.2f} s  x{wall / base:4.2f} of one host  (slowest readiness {ready:.2f} s, "
                  f"outside it {wall - ready:.2f} s, specctl CPU {cpu[(label, count)]:.2f} s, exit {code})")
        return 0
    finally:
        for process in proxies:
            process.kill()
            process.join()
        lab.stop()
        for quota in quotas:
            quota.remove()


if __name__ == "__main__":
    sys.exit(main())
