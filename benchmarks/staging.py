"""Staging, measured in one run on real sshd hosts (network namespaces; needs root), with the real
huggingface_hub client on the hosts against the test suite's Hub endpoint (tests/hub_endpoint.py).

1. An already-staged 64-shard checkpoint, staged again on 1 and on 8 hosts, each host's SSH behind
   a delaying proxy (50 ms each way): SSH commands per host and wall time, 8 hosts against one.
2. A deploy's outage on the reference engine, with staging and with `--no-stage` (the engine
   downloads the weights itself after the old server was stopped), the endpoint's uplink limited
   so that the download takes a few seconds: the longest stretch in which the profile's port
   answered no /health, polled every 50 ms.

    .venv/bin/python benchmarks/staging.py [--latency-ms 50] [--rate-mb-s 1.0]
"""

from __future__ import annotations

import argparse
import collections
import hashlib
import io
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import yaml  # noqa: E402

from benchmarks.deploy_scaling import delayed_fleet  # noqa: E402
from examples.hub import write_checkpoint  # noqa: E402
from specctl.cli.app import main as specctl  # noqa: E402
from specctl.flows.demo import MODELS, write_inputs  # noqa: E402
from specctl.hosts import _ssh_runner  # noqa: E402
from tests.hub_endpoint import HubEndpoint, HubRepo  # noqa: E402
from tests.integration.health import HealthPolls  # noqa: E402
from tests.integration.sshd import SshLab, namespaces_work  # noqa: E402

PORT = 31870
BIG, TINY = "bench/sixty-four-shards", "bench/tiny-llama"
COMMIT = {BIG: hashlib.sha1(b"64").hexdigest(), TINY: hashlib.sha1(b"tiny").hexdigest()}

COMMANDS: collections.Counter[str] = collections.Counter()
_call = _ssh_runner.SshRunner.__call__


def _counted(self: _ssh_runner.SshRunner, argv: Any, **kwargs: Any) -> Any:
    COMMANDS[self.destination.alias] += 1
    return _call(self, argv, **kwargs)


def run(*args: str) -> tuple[int, dict[str, Any] | None]:
    out = io.StringIO()
    code = specctl(list(args), stdout=out, stderr=io.StringIO())
    try:
        return code, json.loads(out.getvalue())
    except ValueError:
        return code, None


def profile(work: Path, name: str, model: str, hub: HubEndpoint, cache: str) -> str:
    path = work / "profiles" / name
    path.write_text(yaml.safe_dump({
        "apiVersion": "specctl/v1", "kind": "Profile", "extends": "tiny-llama-v1.yaml",
        "metadata": {"name": "tiny-llama-demo", "version": 5},
        "target": {"model": model, "revision": COMMIT[model]},
        "engine": {"env": {"HF_ENDPOINT": hub.url, "HF_HUB_CACHE": cache, "HF_HUB_DISABLE_XET": "1"}},
    }, sort_keys=False))
    return str(path)


def outage(url: str, deploy: list[str]) -> tuple[float, int]:
    """The longest run of unanswered /health polls while `deploy` runs, and its exit status."""
    with HealthPolls(url) as health:
        code, _ = run(*deploy)
        health.wait_answered(30)
    return health.longest_gap(), code


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--latency-ms", type=float, default=50.0)
    parser.add_argument("--rate-mb-s", type=float, default=1.0, help="the Hub endpoint's uplink in the outage part")
    args = parser.parse_args()
    if not namespaces_work():
        print("needs root and network namespaces")
        return 2
    _ssh_runner.SshRunner.__call__ = _counted  # type: ignore[method-assign]
    work = Path(tempfile.mkdtemp())
    lab = SshLab(work / "lab", True)
    proxies: list[Any] = []
    hub: HubEndpoint | None = None
    try:
        lab.start(8)
        big = write_checkpoint(work / "big", json.loads((MODELS / "tiny-llama" / "config.json").read_text()),
                               [(f"model.layers.{i}.weight", "BF16", (256, 1024)) for i in range(64)], shards=64)
        hub = HubEndpoint({BIG: HubRepo({p.name: p for p in big.iterdir()}, COMMIT[BIG]),
                           TINY: HubRepo({p.name: p for p in (MODELS / "tiny-llama").iterdir()}, COMMIT[TINY])},
                          host=lab.gateway("h0")).start()
        proxies += delayed_fleet(lab, work, args.latency_ms)
        common = ["--inventory", str(work / "hosts.yaml"), "--ssh-config", str(work / "ssh_config"), "--offline"]
        v1, _ = write_inputs(work, PORT)
        data = yaml.safe_load(v1.read_text())
        data["engine"]["host"] = "0.0.0.0"  # reached from outside the host's namespace
        v1.write_text(yaml.safe_dump(data, sort_keys=False))
        staged = profile(work, "big.yaml", BIG, hub, str(work / "cache"))  # one cache: the hosts share a file system

        all_hosts = ",".join(f"h{i}" for i in range(8))
        code, first = run("--json", "stage", staged, "--hosts", all_hosts, *common)
        assert code == 0 and first, first
        fetched = sum(s["fetched"] for h in first["hosts"] for s in h["staged"])
        rows = {}
        for count in (1, 8):
            COMMANDS.clear()
            hosts = ",".join(f"h{i}" for i in range(count))
            start = time.perf_counter()
            code, again = run("--json", "stage", staged, "--hosts", hosts, *common)
            wall = time.perf_counter() - start
            assert code == 0 and again and all(s["fetched"] == 0 for h in again["hosts"] for s in h["staged"]), again
            rows[count] = (wall, max(COMMANDS.values()), len(COMMANDS))
        print(f"already staged, 64 shards ({fetched} bytes fetched on the first stage), {args.latency_ms:.0f} ms each way:")
        for count, (wall, per_host, reached) in rows.items():
            print(f"  {count} host(s): {wall:5.2f} s  x{wall / rows[1][0]:4.2f} of one host  "
                  f"({per_host} SSH command(s) on the busiest of {reached} host(s))")

        hub.rate_bytes_per_s = args.rate_mb_s * 1e6
        url = f"http://{lab.hosts['h0'].address}:{PORT}/health"
        base = ["--hosts", "h0", "--no-verify", "--skip-check", *common]
        results: dict[str, tuple[float, float, int]] = {}
        for label, extra in (("with staging", []), ("without (--no-stage)", ["--no-stage"])):
            code, answer = run("--json", "deploy", str(v1), *base)
            assert code == 0, answer
            light = profile(work, f"hub-{len(results)}.yaml", TINY, hub, str(work / f"cache-{len(results)}"))
            start = time.perf_counter()
            gap, code = outage(url, ["deploy", light, *base, *extra])
            results[label] = (gap, time.perf_counter() - start, code)
        size = sum(p.stat().st_size for p in (MODELS / "tiny-llama").iterdir())
        print(f"outage of a deploy on the reference engine ({size / 1e6:.1f} MB of weights at {args.rate_mb_s} MB/s):")
        for label, (gap, total, code) in results.items():
            print(f"  {label:<22} /health down {gap:5.2f} s of a {total:5.2f} s deploy (exit {code})")
        run("stop", str(v1), "--hosts", "h0", *common)
        return 0
    finally:
        if hub is not None:
            hub.stop()
        for process in proxies:
            process.kill()
            process.join()
        lab.stop()


if __name__ == "__main__":
    sys.exit(main())
