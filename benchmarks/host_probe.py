"""What asking the hosts' own engines costs, in one run: real sshd hosts (network namespaces; needs
root) whose engine interpreter is the sglang 0.5.23 CPU environment (`make sglang-env`), the Llama
example's question. Goal: no more than the probe's own time once per distinct engine build.

    .venv/bin/python benchmarks/host_probe.py [--python .venv-sglang/bin/python]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from examples.hub import build_models  # noqa: E402
from specctl.flows import static  # noqa: E402
from specctl.flows.host_probe import probe_fleet  # noqa: E402
from specctl.flows.probe import probe_question, run_probe  # noqa: E402
from specctl.hosts.ssh import ssh_transport  # noqa: E402
from specctl.hosts.ssh_destination import SshOptions, resolve  # noqa: E402
from tests.integration.sshd import SshLab, namespaces_work  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--python", default=str(ROOT / ".venv-sglang" / "bin" / "python"))
    args = parser.parse_args()
    if not namespaces_work():
        print("needs root and network namespaces")
        return 2
    work = Path(tempfile.mkdtemp())
    hub = work / "hub"
    build_models(hub, json.loads((ROOT / "examples" / "models.json").read_text())["models"])
    os.environ["HF_HUB_CACHE"] = str(hub)  # before huggingface_hub is first imported: it reads this once
    inputs = static.check(ROOT / "profiles" / "llama-3.1-8b-b200.yaml", offline=True).inputs
    question, _ = probe_question(inputs)
    lab = SshLab(work / "lab", True)
    try:
        lab.start(8)
        options = SshOptions(config_path=str(lab.ssh_config))
        transports = {name: ssh_transport(name, resolve(name, options), options) for name in lab.hosts}
        for t in transports.values():
            t.run(["true"])  # connections open: what is measured is the asking, not the SSH handshakes

        start = time.perf_counter()
        alone = run_probe(args.python, str(inputs.engine.probe_script()), question)
        probe_s = time.perf_counter() - start
        assert "error" not in alone, alone
        rows = [("the probe alone, on this machine", probe_s, None)]
        for label, hosts, cache in (("1 host, nothing cached", 1, work / "c1"), ("8 hosts of one build, nothing cached", 8, work / "c8"),
                                    ("8 hosts, answer cached", 8, work / "c8")):
            chosen = {name: transports[name] for name in list(transports)[:hosts]}
            start = time.perf_counter()
            fleet = probe_fleet(inputs, chosen, args.python, cache=cache)
            rows.append((label, time.perf_counter() - start, fleet.probed))
        for label, seconds, probed in rows:
            runs = f"  ({probed} probe run(s))" if probed is not None else ""
            print(f"{label:<40} {seconds:6.2f} s  x{seconds / probe_s:4.2f} of the probe alone{runs}")
        return 0
    finally:
        lab.stop()


if __name__ == "__main__":
    sys.exit(main())
