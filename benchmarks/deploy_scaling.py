"""A deploy of one release to 1, 4 and 8 hosts, each reached over SSH through 50 ms of added latency
(a delaying proxy: the kernel here has no netem), in one run. Needs root (network namespaces).

Each host runs the reference engine with the tiny models; on this 2-core machine their start-ups
compete for the CPU, so the script also reports the time spent outside waiting for readiness. The
proxies run in their own process, as the network would: they do not share specctl's interpreter.

    sudo .venv/bin/python benchmarks/deploy_scaling.py [--latency-ms 50]
"""

from __future__ import annotations

import argparse
import io
import json
import multiprocessing
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


def _proxy_process(upstream: tuple[str, int], delay_s: float) -> tuple[int, multiprocessing.Process]:
    """A delaying proxy in a process of its own; returns its port."""
    parent, child = multiprocessing.Pipe()
    process = multiprocessing.get_context("fork").Process(target=_serve_proxy, args=(upstream, delay_s, child), daemon=True)
    process.start()
    return int(parent.recv()), process


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    args = parser.parse_args()
    if not namespaces_work():
        print("needs root and network namespaces")
        return 2
    work = Path(tempfile.mkdtemp())
    lab = SshLab(work / "lab", True)
    proxies: list[multiprocessing.Process] = []
    try:
        lab.start(8)
        config = lab.ssh_config.read_text()
        known = lab.known_hosts.read_text()
        lines = ["apiVersion: specctl/v1", "kind: Inventory", "hosts:"]
        for host in lab.hosts.values():
            proxy_port, process = _proxy_process((host.address, host.port), args.latency_ms / 1000)
            proxies.append(process)
            config = config.replace(f"HostName {host.address}\n  Port {host.port}", f"HostName 127.0.0.1\n  Port {proxy_port}")
            known += f"[127.0.0.1]:{proxy_port} ssh-ed25519 {host.host_key_pub}\n"
            lines += [f"  {host.name}:", f"    ssh: {host.name}", f"    root: {host.root}", f"    address: {host.address}"]
        (work / "known").write_text(known)
        (work / "ssh_config").write_text(config.replace(str(lab.known_hosts), str(work / "known")))
        (work / "hosts.yaml").write_text("\n".join(lines) + "\n")
        v1, _ = write_inputs(work, 31700)
        data = yaml.safe_load(v1.read_text())
        data["engine"]["host"] = "0.0.0.0"
        v1.write_text(yaml.safe_dump(data, sort_keys=False))
        results = {}
        for count in (1, 4, 8):
            hosts = ",".join(f"h{i}" for i in range(count))
            out = io.StringIO()
            start = time.perf_counter()
            code = specctl(["--json", "deploy", str(v1), "--hosts", hosts, "--inventory", str(work / "hosts.yaml"),
                            "--ssh-config", str(work / "ssh_config")], stdout=out, stderr=io.StringIO())
            wall = time.perf_counter() - start
            rows = json.loads(out.getvalue())["hosts"]
            ready = max(float(r["detail"].split("ready in ")[1].split(" s")[0]) for r in rows if r["ok"])
            results[count] = (wall, ready, code)
            specctl(["stop", str(v1), "--hosts", hosts, "--inventory", str(work / "hosts.yaml"), "--ssh-config", str(work / "ssh_config")],
                    stdout=io.StringIO(), stderr=io.StringIO())
        base = results[1][0]
        print(f"added latency {args.latency_ms:.0f} ms each way on every host's SSH")
        for count, (wall, ready, code) in results.items():
            print(f"{count} host(s): {wall:6.2f} s  x{wall / base:4.2f} of one host  (slowest readiness {ready:.2f} s, "
                  f"outside it {wall - ready:.2f} s, exit {code})")
        return 0
    finally:
        for process in proxies:
            process.kill()
            process.join()
        lab.stop()


if __name__ == "__main__":
    sys.exit(main())
