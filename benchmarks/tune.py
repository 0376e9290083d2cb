"""Does `specctl tune` find the setting an exhaustive grid finds, with fewer requests?

On the shipped tiny models, served by the reference engine on the `local` host, in one run:

The incumbent (measured first) is the demo profile's own setting, num_steps 3.

1. exhaustive: every candidate of the grid (num_steps 1..5, eagle_topk 1) deployed as a release and
   measured to the planned count (the same tune flow, elimination off); its winner is the highest
   estimate of output tokens/s per request;
2. tune: the same grid under successive elimination (drop a candidate once its anytime-valid
   interval lies below the best's; Bonferroni over the candidates), a second live run;
3. replay: elimination run on the exhaustive run's own requests (same data, no machine noise
   between the two designs), which tells the method apart from run-to-run drift.

It prints both request counts and all three winners.

    .venv/bin/python benchmarks/tune.py [--requests 48] [--steps 1,2,3,4,5] [--port 31810]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from specctl.flows import static  # noqa: E402
from specctl.flows.demo import STARTUP_BUDGET_S, write_inputs, write_inventory  # noqa: E402
from specctl.flows.session import Context  # noqa: E402
from specctl.flows.tune import TuneResult, tune  # noqa: E402
from specctl.hosts.inventory import resolve_hosts  # noqa: E402
from specctl.hosts.local import LOCAL  # noqa: E402
from specctl.ledger.ledger import Ledger  # noqa: E402
from specctl.verdict.elimination import replay  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--requests", type=int, default=48, help="planned requests per candidate")
    parser.add_argument("--steps", default="1,2,3,4,5")
    parser.add_argument("--port", type=int, default=31810)
    parser.add_argument("--workdir", type=Path, default=None)
    args = parser.parse_args()
    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="specctl-tune-bench-"))
    v1, _ = write_inputs(workdir, args.port, requests=args.requests)
    data = yaml.safe_load(v1.read_text())
    data["tune"] = {"num_steps": [int(s) for s in args.steps.split(",")], "eagle_topk": [1], "requests": args.requests}
    v1.write_text(yaml.safe_dump(data, sort_keys=False))
    [host] = resolve_hosts([LOCAL], write_inventory(workdir))
    ctx = Context(Ledger(workdir / "ledger.db"), "benchmarks/tune.py", budget_s=STARTUP_BUDGET_S)
    report = static.check(v1)
    try:
        started = time.perf_counter()
        full = tune(ctx, report, host, exhaustive=True, output=workdir / "exhaustive.yaml")
        full_s = time.perf_counter() - started
        started = time.perf_counter()
        live = tune(ctx, report, host, output=workdir / "tuned.yaml")
        live_s = time.perf_counter() - started
    finally:
        from specctl.flows.servers import Reach, stop

        stop(Reach(), data["metadata"]["name"], [host], command="benchmarks/tune.py")
        ctx.ledger.close()
    offline = replay([(c.candidate.key, [(float(g.completion_tokens), g.e2e_latency_s or g.client_latency_s)
                                          for g in c.measurement.generations] if c.measurement else [])
                      for c in full.candidates], planned_n=full.planned_n, batch=full.batch)
    show("exhaustive", full, full_s)
    show("tune (live)", live, live_s)
    print(f"\nreplay of elimination on the exhaustive run's requests: winner {offline.best.key if offline.best else None}, "
          f"{offline.requests} requests (of {full.requests}); per candidate: "
          + ", ".join(f"{s.key.split()[0]} {s.requests}{' dropped' if s.eliminated else ''}" for s in offline.standings))
    same = full.winner and live.winner and full.winner.candidate.key == live.winner.candidate.key
    print(f"\nwinners: exhaustive {key(full)}, tune {key(live)}, replay {offline.best.key if offline.best else None}"
          f" ({'same' if same else 'DIFFERENT'} live); requests: exhaustive {full.requests}, tune {live.requests}, "
          f"replay {offline.requests}")
    if not same and full.winner and live.winner:
        by_key = {c.candidate.key: c.standing.interval for c in full.candidates}
        mine, best = by_key.get(live.winner.candidate.key), full.winner.standing.interval
        tied = mine is not None and best is not None and mine.high >= best.low
        print(f"in the exhaustive run, tune's winner measured {mine.estimate if mine else 0:.1f} against {best.estimate if best else 0:.1f}: "
              + ("the intervals overlap, a tie the exhaustive grid cannot break either" if tied else "decided worse"))
    print(f"work directory: {workdir}")
    return 0


def key(result: TuneResult) -> str:
    return result.winner.candidate.key if result.winner else "none"


def show(label: str, result: TuneResult, seconds: float) -> None:
    print(f"\n{label}: {result.requests} requests, {seconds:.0f} s, winner {key(result)} "
          f"(every interval at {result.level:.4f}: Bonferroni over {len(result.candidates)} candidates)")
    for row in result.rows():
        iv = row["interval"] or {}
        print(f"  {row['key']:<28} {row['estimate'] or 0:8.1f} tok/s  [{iv.get('low', 0):7.1f}, {iv.get('high', 0):7.1f}]"
              f"  {row['requests']:3d} requests  {'WINNER' if row['winner'] else 'eliminated' if row['eliminated'] else 'kept'}")


if __name__ == "__main__":
    sys.exit(main())
