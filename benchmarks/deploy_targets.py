"""Deploy to ready through Slurm against through SSH, on the same reference engine, in one run.

Starts the test suite's real labs (tests/integration: an OpenSSH host in a network namespace, and a
Slurm 22.05 cluster of two slurmd nodes in theirs, whose login node is that same SSH host, so both
targets pay the same round trips), then deploys the demo's v1 profile `--repeat`
times to each, interleaved, without verify (the same server either way: the measurement is the
deploy, not the model). Per deploy: the wall time of `specctl deploy` to its return with `current`
switched, and the start-up it reports (from start/submit to the first generation). The difference
between the targets is what the scheduler adds: sbatch, placement, slurmd launching the batch step
and the srun step, and the polls that find the job running. Needs root (namespaces), sshd and
slurm-wlm (`make test` installs them).

    .venv/bin/python benchmarks/deploy_targets.py [--repeat 5]
"""

from __future__ import annotations

import argparse
import io
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.cli.app import main as specctl  # noqa: E402
from specctl.flows.demo import write_inputs  # noqa: E402
from tests.integration.slurm import SlurmLab  # noqa: E402
from tests.integration.sshd import SshLab, namespaces_work  # noqa: E402

PORT = 31980


def deploy(args: list[str]) -> tuple[float, float]:
    """(wall seconds of the deploy, the start-up it reports)."""
    out, err = io.StringIO(), io.StringIO()
    started = time.perf_counter()
    code = specctl(["--json", "deploy", *args, "--no-verify", "--baseline", "skip"], stdout=out, stderr=err)
    wall = time.perf_counter() - started
    if code != 0:
        raise SystemExit(f"deploy failed ({code}): {out.getvalue()[-2000:]} {err.getvalue()[-2000:]}")
    [host] = json.loads(out.getvalue())["hosts"]
    return wall, float(host["detail"].split("ready in ", 1)[1].split(" s", 1)[0])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    if not namespaces_work():
        raise SystemExit("needs root and network namespaces (the labs of the test suite)")
    with tempfile.TemporaryDirectory(prefix="specctl-targets-") as tmp:
        work = Path(tmp)
        ssh, slurm = SshLab(work / "ssh", True), SlurmLab(work / "slurm")
        (work / "ssh").mkdir()
        (work / "slurm").mkdir()
        try:
            ssh.start(1)
            slurm.start()
            v1, _ = write_inputs(work, PORT)
            data = yaml.safe_load(v1.read_text())
            data["engine"]["host"] = "0.0.0.0"
            data["hosts"] = ["h0"]
            v1.write_text(yaml.safe_dump(data, sort_keys=False))
            inventory = ssh.inventory(work / "hosts.yaml", sys.executable)
            doc = yaml.safe_load(inventory.read_text())
            doc["clusters"] = {"lab": {"kind": "slurm", "login": "h0", "root": str(slurm.shared_dir / "specctl"), "gres": "gpu:2",
                                       "python": sys.executable, "env": {"SLURM_CONF": str(slurm.conf_path)}}}
            inventory.write_text(yaml.safe_dump(doc))
            common = ["--inventory", str(inventory), "--ssh-config", str(ssh.ssh_config), "--ledger", str(work / "ledger.db")]
            times: dict[str, list[tuple[float, float]]] = {"ssh": [], "slurm": []}
            for _ in range(args.repeat):  # interleaved, so drift hits both alike
                times["ssh"].append(deploy([str(v1), "--hosts", "h0", *common]))
                times["slurm"].append(deploy([str(v1), "--hosts", "lab", *common]))
            print(f"{args.repeat} deploys per target, interleaved, no verify; medians (min-max), seconds")
            print(f"{'target':<8}{'deploy to ready':>26}{'start to first generation':>30}")
            median = {}
            for name, rows in times.items():
                walls, starts = [w for w, _ in rows], [s for _, s in rows]
                median[name] = statistics.median(walls)
                print(f"{name:<8}{median[name]:>10.2f} ({min(walls):.2f}-{max(walls):.2f})"
                      f"{statistics.median(starts):>14.2f} ({min(starts):.2f}-{max(starts):.2f})")
            print(f"slurm / ssh: {median['slurm'] / median['ssh']:.2f}x, +{median['slurm'] - median['ssh']:.2f} s per deploy")
        finally:
            for profile in ("tiny-llama-demo",):
                specctl(["stop", profile, "--inventory", str(work / "hosts.yaml"), "--ssh-config", str(ssh.ssh_config), "--hosts", "h0,lab"],
                        stdout=io.StringIO(), stderr=io.StringIO())
            slurm.stop()
            ssh.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
