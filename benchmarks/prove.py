"""What `prove` costs, and what a deploy failing at it costs the server it did not stop, in one run.

On this machine's `local` host (no SSH), with the real reference engine: the demo's v1 profile is
deployed `--repeat` times without verify, each deploy followed by a rollback to the release before
it (a rollback always verifies). Per run, from the ledger's step events: the `prove` step's seconds
against the run's wall time (the ratio is what prove adds). Then, with a release serving, a deploy
whose release names an unset secret fails at `prove` `--repeat` times while a thread asks the
serving server's /health every 20 ms: the outage is the failed answers (zero expected), and the
server's pid before and after. With SPECCTL_SGLANG_PYTHON set (the sglang lab's interpreter), also
what sglang's own parse costs in `prove` (it imports sglang's server arguments).

    .venv/bin/python benchmarks/prove.py [--repeat 5] [--json]
"""

from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
import tempfile
import threading
import time
import urllib.request
from datetime import datetime
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.cli.app import main as specctl  # noqa: E402
from specctl.flows.demo import write_inputs, write_inventory  # noqa: E402

PORT = 31990
SECRET = "SPECCTL_BENCH_UNSET_SECRET"


def cli(*args: str) -> tuple[int, dict[str, Any]]:
    out, err = io.StringIO(), io.StringIO()
    code = specctl(["--json", *args], stdout=out, stderr=err)
    try:
        return code, json.loads(out.getvalue() or "{}")
    except ValueError as exc:
        said = f"{out.getvalue()[-1000:]} {err.getvalue()[-1000:]}"
        raise SystemExit(f"specctl {' '.join(args)}: {code}: {said}") from exc


def step_seconds(common: list[str], run: str) -> tuple[float, float]:
    """(the prove step's seconds, the run's wall seconds from its first step to its last event)."""
    _, shown = cli("show", run, *common[2:])  # the ledger only
    at = {(e["step"], e["event"]): _t(e["at"]) for e in shown["events"] if e["host"] == "local"}
    times = sorted(at.values())
    return at[("prove", "ended")] - at[("prove", "began")], times[-1] - times[0]


def _t(stamp: str | float) -> float:
    return float(stamp) if isinstance(stamp, int | float) else datetime.fromisoformat(stamp).timestamp()


def newest(common: list[str], kind: str) -> str:
    _, runs = cli("runs", "--kind", kind, *common[2:])
    return str(runs["runs"][-1]["id"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    os.environ.pop(SECRET, None)
    with tempfile.TemporaryDirectory(prefix="specctl-prove-") as tmp:
        work = Path(tmp)
        v1, _ = write_inputs(work, PORT)
        inventory = write_inventory(work)
        common = ["--inventory", str(inventory), "--ledger", str(work / "ledger.db")]
        data = yaml.safe_load(v1.read_text())
        data["metadata"]["version"] = 9
        data["secrets"] = [SECRET]
        failing = work / "profiles" / "failing.yaml"
        failing.write_text(yaml.safe_dump(data, sort_keys=False))
        try:
            code, first = cli("deploy", str(v1), "--no-verify", *common)
            assert code == 0, first
            previous = first["hosts"][0]["release"]
            deploys, rollbacks = [], []
            for _ in range(args.repeat):
                code, done = cli("deploy", str(v1), "--no-verify", *common)
                assert code == 0, done
                deploys.append(step_seconds(common, newest(common, "deploy")))
                code, back = cli("rollback", str(v1), "--to", previous, *common)
                assert code == 0, back
                rollbacks.append(step_seconds(common, newest(common, "rollback")))
                previous = done["hosts"][0]["release"]
            serving = first_serving(work)
            pid = pid_of(work, serving)
            failed, asked, walls = outage(lambda: cli("deploy", str(failing), "--no-verify", *common), args.repeat)
            same = pid_of(work, serving) == pid and os.path.exists(f"/proc/{pid}")
        finally:
            specctl(["stop", str(v1), *common[:2]], stdout=io.StringIO(), stderr=io.StringIO())
        sglang = sglang_prove(work)
    result = {
        "deploy": summary(deploys),
        "rollback": summary(rollbacks),
        "failing_deploy": {
            "runs": args.repeat,
            "median_s": round(statistics.median(walls), 3),
            "health_checks": asked,
            "failed_health_checks": failed,
            "serving_pid_unchanged": same,
        },
        "sglang_prove_s": sglang,
    }
    if args.json:
        print(json.dumps(result, indent=2))
        return 0
    for kind in ("deploy", "rollback"):
        r = result[kind]
        print(
            f"{kind:9} prove {r['prove_s']:.3f} s of {r['wall_s']:.2f} s ({r['share']:.1%}; "
            f"range {r['prove_min_s']:.3f}-{r['prove_max_s']:.3f} s), median of {r['runs']}"
        )
    f = result["failing_deploy"]
    print(
        f"failing at prove: {f['runs']} deploys, median {f['median_s']:.2f} s; the serving server answered "
        f"{f['health_checks'] - f['failed_health_checks']}/{f['health_checks']} health checks, "
        f"pid unchanged: {f['serving_pid_unchanged']}"
    )
    if sglang is not None:
        print(f"sglang's own parse in prove (imports sglang's server arguments): {sglang:.2f} s")
    return 0


def summary(rows: list[tuple[float, float]]) -> dict[str, Any]:
    prove = [p for p, _ in rows]
    wall = [w for _, w in rows]
    return {
        "runs": len(rows),
        "prove_s": round(statistics.median(prove), 3),
        "prove_min_s": round(min(prove), 3),
        "prove_max_s": round(max(prove), 3),
        "wall_s": round(statistics.median(wall), 3),
        "share": round(statistics.median(p / w for p, w in rows), 4),
    }


def first_serving(work: Path) -> str:
    return (work / "hosts" / "local" / "tiny-llama-demo" / "current").resolve().name


def pid_of(work: Path, release: str) -> int:
    return int((work / "hosts" / "local" / "tiny-llama-demo" / "releases" / release / "server.pid").read_text())


def outage(fail: Any, repeat: int) -> tuple[int, int, list[float]]:
    """Failed /health answers of the serving server while `fail` runs `repeat` times."""
    stop = threading.Event()
    counts = [0, 0]

    def ask() -> None:
        while not stop.is_set():
            counts[0] += 1
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{PORT}/health", timeout=2) as answer:
                    if answer.status != 200:
                        counts[1] += 1
            except OSError:
                counts[1] += 1
            time.sleep(0.02)

    asker = threading.Thread(target=ask, daemon=True)
    asker.start()
    walls = []
    for _ in range(repeat):
        began = time.perf_counter()
        code, _ = fail()
        walls.append(time.perf_counter() - began)
        assert code == 3, code
    stop.set()
    asker.join()
    return counts[1], counts[0], walls


def sglang_prove(work: Path) -> float | None:
    """The prove command against sglang's interpreter (its version and parse), on a launch script of
    sglang's own argv: what a real sglang host adds."""
    python = os.environ.get("SPECCTL_SGLANG_PYTHON")
    if not python:
        return None
    from specctl.engines import get_engine
    from specctl.flows import prove as proving
    from specctl.hosts.local import local_transport

    launch = f"#!/bin/sh\nset -eu\nexec {python} -m sglang.launch_server --model-path {work} --port {PORT}\n"
    best = []
    for _ in range(3):
        proof = proving.run(
            local_transport(),
            get_engine("sglang"),
            release_dir=str(work / "none"),
            root=str(work),
            pinned="",
            launch=launch,
        )
        assert proof.engine is not None and proof.engine.get("check") is None, proof
        best.append(proof.seconds)
    return round(statistics.median(best), 2)


if __name__ == "__main__":
    sys.exit(main())
