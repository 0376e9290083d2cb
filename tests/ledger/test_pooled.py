"""Several hosts' figures pooled from the ledger (history.metrics, pool_run, run_diff, trend): on a
real SQLite ledger with runs recorded through the Ledger API, as verify records them."""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest

from specctl.ledger.history import metrics, pool_run, run_diff, trend
from specctl.ledger.ledger import Ledger
from specctl.verdict import gates
from specctl.verdict.generation import Generation
from specctl.verdict.measure import Measurement
from specctl.verdict.summary import summarize

PROFILE = {"metadata": {"name": "tiny-llama-demo", "version": 1}}


def requests(accept: float, tput: float, *, n: int = 24, seed: int = 0) -> Measurement:
    """n requests of 64 tokens whose accept length and speed vary about `accept` and `tput`."""
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        verify = max(1, round(64 / (accept * rng.uniform(0.85, 1.15))))
        e2e = 64 / (tput * rng.uniform(0.9, 1.1))
        out.append(
            Generation(
                text="",
                output_ids=(),
                prompt_tokens=10,
                completion_tokens=64,
                finish_reason="length",
                e2e_latency_s=e2e,
                client_latency_s=e2e + 0.01,
                spec_verify_ct=verify,
                spec_num_correct_drafts=64 - verify,
                spec_num_proposed_drafts=3 * verify,
                first_token_latency_s=0.05,
            )
        )
    return Measurement(tuple(out), wall_s=n * 64 / tput / 4)


def host_verdict(
    run_id: str, m: Measurement, *, baseline: tuple[str, Measurement] | None = None, gate: float = 3.0
) -> dict[str, Any]:
    """What verify records for one host measured at concurrency 1 (flows/verify.py HostVerdict.to_dict)."""
    base = baseline[1] if baseline else None
    spec = gates.GateSpec(min_accept_length=gate, min_speedup=1.0 if base else None)
    judged = gates.evaluate(spec, m, base)
    summary = {"concurrency": 1, **summarize(m, base, sequential=False, planned_n=len(m.generations))}
    point = {"concurrency": 1, "gates": [g.to_dict() for g in judged], "summary": summary, "stopped_early": False}
    return {
        "passed": all(g.passed for g in judged),
        "gates": point["gates"],
        "summary": summary,
        "points": [point],
        "stopped_early": False,
        "baseline_run": baseline[0] if baseline else None,
        "profile": "tiny-llama-demo",
        "version": 1,
        "release": run_id,
    }


def record(
    book: Ledger,
    run_id: str,
    hosts: dict[str, Measurement],
    *,
    kind: str = "verify",
    baselines: dict[str, tuple[str, Measurement]] | None = None,
    summary_only: tuple[str, ...] = (),
) -> None:
    """A run on `hosts` as verify records it; the hosts in `summary_only` as a ledger from before
    the requests were kept (a verdict, no measurements)."""
    book.begin(run_id, kind, command="specctl verify", profile=PROFILE, hosts=list(hosts))
    passed = True
    for host, m in hosts.items():
        verdict = host_verdict(run_id, m, baseline=(baselines or {}).get(host))
        passed &= verdict["passed"]
        measurements = None if host in summary_only else {"points": [{"concurrency": 1, **m.to_dict()}]}
        book.record_host(
            run_id, host, release=run_id, measurements=measurements, verdict=verdict, passed=verdict["passed"]
        )
    book.finish(run_id, "succeeded" if passed else "failed", verdict={"passed": passed})


def record_baseline(book: Ledger, run_id: str, host: str, m: Measurement) -> None:
    """A baseline run as flows/baseline.py records it."""
    book.begin(run_id, "baseline", command="specctl baseline", profile=PROFILE, hosts=[host])
    summary = {"concurrency": 1, **summarize(m, None, sequential=False, planned_n=len(m.generations))}
    book.record_host(
        run_id,
        host,
        release=run_id,
        measurements={"points": [{"concurrency": 1, **m.to_dict()}]},
        verdict={
            "summary": summary,
            "points": [{"concurrency": 1, "summary": summary, "gates": [], "stopped_early": False}],
        },
        passed=True,
    )
    book.finish(run_id, "succeeded", verdict={"passed": True, "summary": summary})


BASES = ("20261201T080000Z-b00001", "20261201T080100Z-b00002")


@pytest.fixture
def book(tmp_path: Path) -> Any:
    ledger = Ledger(tmp_path / "ledger.db")
    yield ledger
    ledger.close()


def _tokens_over_steps(*measured: Measurement) -> float:
    both = [g for m in measured for g in m.generations]
    return sum(g.completion_tokens for g in both) / sum(g.spec_verify_ct or 0 for g in both)


def test_two_hosts_are_pooled_and_each_is_kept(book: Ledger) -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.55, 52.0, seed=2)
    record(book, "run-1", {"h1": a, "h2": b})
    m = metrics(book.get("run-1"))
    assert m["accept_length"] == pytest.approx(_tokens_over_steps(a, b))
    assert m["intervals"]["accept_length"]["n"] == 48
    assert m["pooled"]["hosts"] == ["h1", "h2"]
    hosts = {h["host"]: h for h in m["per_host"]}
    assert hosts["h1"]["accept_length"] == pytest.approx(_tokens_over_steps(a))
    assert hosts["h2"]["accept_length"] == pytest.approx(_tokens_over_steps(b))
    pooled = m["intervals"]["accept_length"]
    for host in hosts.values():  # the hosts agree: the pooled interval is narrower than either's
        own = host["intervals"]["accept_length"]
        assert pooled["high"] - pooled["low"] < own["high"] - own["low"]
        assert host["passed"] is True


def test_one_host_is_its_own_figure_as_before(book: Ledger) -> None:
    a = requests(3.5, 50.0, seed=1)
    record(book, "run-1", {"h1": a})
    m = metrics(book.get("run-1"))
    assert m["pooled"] is None and pool_run(book.get("run-1")) is None
    assert m["accept_length"] == pytest.approx(_tokens_over_steps(a)) == m["per_host"][0]["accept_length"]


def test_a_host_recorded_without_its_requests_leaves_the_pooled_figure_unknown(book: Ledger) -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.55, 52.0, seed=2)
    record(book, "run-1", {"h1": a, "h2": b}, summary_only=("h2",))
    m = metrics(book.get("run-1"))
    assert m["accept_length"] is None and m["intervals"]["accept_length"] is None
    assert any("h2" in note and "not its requests" in note for note in m["pooled"]["notes"])
    assert [h["accept_length"] for h in m["per_host"]] == [
        pytest.approx(_tokens_over_steps(a)),
        pytest.approx(_tokens_over_steps(b)),
    ]  # each host's own figure is still there
    assert trend([book.get("run-1")]) == {}  # nothing pooled: not charted as if it were


def test_speedup_is_pooled_only_with_every_hosts_baseline(book: Ledger) -> None:
    from specctl.ledger.history import baselines_of

    a, b = requests(3.5, 50.0, seed=1), requests(3.5, 52.0, seed=2)
    base1, base2 = requests(1.0, 40.0, seed=3), requests(1.0, 41.0, seed=4)
    record_baseline(book, BASES[0], "h1", base1)
    record_baseline(book, BASES[1], "h2", base2)
    record(book, "run-1", {"h1": a, "h2": b}, baselines={"h1": (BASES[0], base1), "h2": (BASES[1], base2)})
    run = book.get("run-1")
    unpooled = metrics(run)
    assert unpooled["speedup"] is None and all(h["speedup"] for h in unpooled["per_host"])
    assert any(note.startswith("speedup: per host only") for note in unpooled["pooled"]["notes"])
    found = baselines_of(book, [run])
    assert sorted(found) == list(BASES)
    pooled = metrics(run, found)

    def tput(*measured: Measurement) -> float:
        both = [g for m in measured for g in m.generations]
        return sum(g.completion_tokens for g in both) / sum(g.e2e_latency_s or 0 for g in both)

    assert pooled["speedup"] == pytest.approx(tput(a, b) / tput(base1, base2))
    assert not any(note.startswith("speedup") for note in pooled["pooled"]["notes"])


def test_a_baseline_two_hosts_shared_counts_once(book: Ledger) -> None:
    from specctl.ledger.history import baselines_of

    a, b, base = requests(3.5, 50.0, seed=1), requests(3.5, 52.0, seed=2), requests(1.0, 40.0, seed=3)
    record_baseline(book, BASES[0], "h1", base)
    record(book, "run-1", {"h1": a, "h2": b}, baselines={"h1": (BASES[0], base), "h2": (BASES[0], base)})
    run = book.get("run-1")
    pooled = pool_run(run, baselines_of(book, [run]))
    assert pooled is not None
    [point] = pooled["points"]
    own = gates.speedup(Measurement((*a.generations, *b.generations), 1.0), base)
    assert own is not None and point["summary"]["speedup"]["estimate"] == pytest.approx(own.estimate)


def test_diff_compares_each_shared_host_then_the_pooled_figures(book: Ledger) -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.55, 52.0, seed=2)
    record(book, "run-1", {"h1": a, "h2": b})
    record(book, "run-2", {"h2": requests(2.0, 35.0, seed=5), "h3": requests(2.0, 35.0, seed=6)})
    rows = run_diff(book.get("run-1"), book.get("run-2"))["measurements"]
    assert [r["host"] for r in rows if r["field"] == "accept_length"] == ["h2", None]  # h1, h3: in one run only
    h2, pooled = (r for r in rows if r["field"] == "accept_length")
    assert h2["a"] == pytest.approx(_tokens_over_steps(b)) and h2["a_interval"]["low"] < h2["a"]
    assert pooled["a"] == pytest.approx(_tokens_over_steps(a, b)) and pooled["b"] < 2.2
    assert pooled["b_interval"]["n"] == 48


def test_the_trend_charts_the_pooled_figure_with_its_gate(book: Ledger) -> None:
    a, b = requests(3.5, 50.0, seed=1), requests(3.55, 52.0, seed=2)
    record(book, "run-1", {"h1": a, "h2": b})
    [point] = trend([book.get("run-1")])["tiny-llama-demo"]
    assert point["accept_length"] == pytest.approx(_tokens_over_steps(a, b))
    assert point["intervals"]["accept_length"]["n"] == 48 and point["gates"] == {"accept_length": 3.0}


def test_a_tune_is_never_pooled(book: Ledger) -> None:
    record(book, "run-1", {"h1": requests(3.5, 50.0, seed=1), "h2": requests(3.5, 50.0, seed=2)}, kind="tune")
    m = metrics(book.get("run-1"))
    assert m["accept_length"] is None and "each host of a tune" in m["pooled"]["notes"][0]
