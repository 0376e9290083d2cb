"""Verify, its gates and operating points, the baseline and rollback's choice of release, in the fast
tier: the `local` host, the engine double with scripted accept lengths and latencies (exact verdicts),
the real release scripts and ledger. The reference engine's own acceptance on right and wrong layers
is measured in tests/integration/test_verify.py and tests/test_demo.py."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from tests.fakes.inputs import fast_inputs, ordered_run_ids, write_profile

NAME = "tiny-llama-demo"


@pytest.fixture
def local(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli: Any, fake_engine: Any) -> Any:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the local host's state root is ~/.specctl/hosts/local
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, v2 = fast_inputs(tmp_path / "work", fake_engine, gates=True)
    fake_engine.on(version=2, accept_length=1.9)  # the wrong layers
    root = tmp_path / "home" / ".specctl" / "hosts" / "local" / NAME
    yield {"v1": str(v1), "v2": str(v2), "profiles": v1.parent, "root": root}
    cli("stop", str(v1))


def link(local: dict[str, Any], name: str = "current") -> str | None:
    path = local["root"] / name
    return path.resolve().name if path.is_symlink() else None


def record(local: dict[str, Any], run_id: str) -> tuple[str, str]:
    """(life, verification) of a release, as its record on the host says."""
    data = json.loads((local["root"] / "releases" / run_id / "record.json").read_text())
    return data["life"], data["verification"]["state"]


def gates(host: dict[str, Any]) -> dict[str, Any]:
    return {g["name"]: g for g in host["verdict"]["gates"]}


def test_v1_verified_v2_fails_its_gate_and_rolls_back_to_v1(cli: Any, local: dict[str, Any], fake_engine: Any) -> None:
    first = cli("--json", "deploy", local["v1"])
    assert first.code == 0, first.stdout + first.stderr
    [h1] = first.json()["hosts"]
    assert h1["verdict"]["passed"] and not h1["verdict"]["drift"]
    assert gates(h1)["accept_length"]["interval"]["estimate"] == pytest.approx(64 / 18)  # 64 tokens in 18 verifies
    good = h1["release"]
    assert link(local) == good and record(local, good) == ("serving", "verified")
    second = cli("--json", "deploy", local["v2"], "--skip-check")
    assert second.code == 4, second.stdout + second.stderr
    [h2] = second.json()["hosts"]
    gate = gates(h2)["accept_length"]
    assert not gate["passed"] and gate["decided"] and gate["interval"]["high"] < 3.0
    assert h2["rolled_back_to"] == good and h2["rollback_verdict"]["passed"]
    assert link(local) == good and record(local, good) == ("serving", "verified")
    assert record(local, h2["release"]) == ("rolled-back", "failed")
    runs = cli("--json", "runs").json()["runs"]
    assert [(r["kind"], r["status"]) for r in runs] == [
        ("deploy", "succeeded"),
        ("deploy", "failed"),
        ("rollback", "succeeded"),
    ]
    assert runs[2]["parent"] == runs[1]["id"] and runs[0]["accept_length"] > 3.0 > runs[1]["accept_length"]
    assert not fake_engine.started(baseline=True)  # no speedup gate: no baseline needed
    records = sorted(p.name for p in (local["root"] / "releases" / good / "runs").iterdir())
    assert f"{runs[0]['id']}.json" in records and f"{runs[2]['id']}.json" in records


def test_no_rollback_keeps_the_failed_release_and_exits_1(cli: Any, local: dict[str, Any]) -> None:
    assert cli("deploy", local["v1"]).code == 0
    kept = cli("--json", "deploy", local["v2"], "--skip-check", "--no-rollback", "--baseline", "skip")
    assert kept.code == 1, kept.stdout + kept.stderr
    [h2] = kept.json()["hosts"]
    assert link(local) == h2["release"] and not h2["rolled_back"]
    assert record(local, h2["release"]) == ("serving", "failed")


def test_rollback_chooses_the_newest_verified_release_that_is_not_current(
    cli: Any, local: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    ordered_run_ids(monkeypatch)  # three deploys within a second: "newest" must mean the last one
    first = cli("--json", "deploy", local["v1"]).json()["hosts"][0]["release"]
    v3 = write_profile(local["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3)
    third = cli("--json", "deploy", str(v3), "--skip-check").json()["hosts"][0]["release"]
    failed = cli("--json", "deploy", local["v2"], "--skip-check", "--no-rollback", "--baseline", "skip")
    assert failed.code == 1 and link(local) == failed.json()["hosts"][0]["release"]
    back = cli("--json", "rollback", NAME)
    assert back.code == 0, back.stdout + back.stderr
    assert back.json()["hosts"][0]["release"] == third and link(local) == third  # not v2 (failed), not v1 (older)
    again = cli("--json", "rollback", NAME)  # v3 is current now: the newest verified other one is v1
    assert again.code == 0 and again.json()["hosts"][0]["release"] == first and link(local) == first
    by_version = cli("--json", "rollback", "--to", f"{NAME}@3")
    assert by_version.code == 0 and link(local) == third and by_version.json()["hosts"][0]["verdict"]["passed"]


def test_a_failed_rollback_verify_exits_1_and_records_the_failure(
    cli: Any, local: dict[str, Any], fake_engine: Any
) -> None:
    good = cli("--json", "deploy", local["v1"]).json()["hosts"][0]["release"]
    v3 = write_profile(local["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3)
    assert cli("deploy", str(v3), "--skip-check").code == 0
    fake_engine.on(version=1, accept_length=1.5)  # v1 no longer passes its gate when restarted
    back = cli("--json", "rollback", "--to", good)
    assert back.code == 1, back.stdout + back.stderr
    assert not back.json()["hosts"][0]["verdict"]["passed"]
    assert record(local, good) == ("serving", "failed")  # it serves (what was asked), and says it failed


def test_speedup_gate_against_the_recorded_baseline(cli: Any, local: dict[str, Any], fake_engine: Any) -> None:
    v3 = write_profile(local["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3, verify={"min_speedup": 1.5})
    fast = cli("--json", "deploy", str(v3), "--skip-check")
    assert fast.code == 0, fast.stdout + fast.stderr
    speedup = gates(fast.json()["hosts"][0])["speedup"]
    # the double reports 10 ms per baseline token and 12 ms per verify: 64 tokens, 18 verifies
    assert speedup["passed"] and speedup["interval"]["estimate"] == pytest.approx(0.64 / 0.216)
    # the first verify found no baseline and ran one (--baseline auto): the target alone, no speculative flags
    assert [(r["kind"], r["status"]) for r in cli("--json", "runs").json()["runs"]] == [
        ("deploy", "succeeded"),
        ("baseline", "succeeded"),
    ]
    [baseline] = fake_engine.started(baseline=True)
    assert "--speculative-algorithm" not in baseline.argv and f"/{NAME}-baseline/releases/" in baseline.release_dir
    assert link(local) == fast.json()["hosts"][0]["release"]  # the deploy's server serves again
    fake_engine.on(version=4, verify_s=0.05)  # verifies too slow to pay for the drafts
    v4 = write_profile(local["profiles"] / "tiny-llama-v4.yaml", "tiny-llama-v3.yaml", 4)
    slow = cli("--json", "deploy", str(v4), "--skip-check", "--baseline", "ledger")
    assert slow.code == 4, slow.stdout + slow.stderr
    [host] = slow.json()["hosts"]
    assert not gates(host)["speedup"]["passed"] and host["verdict"]["baseline_run"]
    assert len(fake_engine.started(baseline=True)) == 1  # the recorded baseline was used, not a new one


def test_operating_points_streamed(cli: Any, local: dict[str, Any], fake_engine: Any) -> None:
    v3 = write_profile(
        local["profiles"] / "tiny-llama-v3.yaml",
        "tiny-llama-v1.yaml",
        3,
        verify={"concurrency": [1, 4], "stream": True, "requests": 8},
        engine={"args": {"enable-metrics": True}},
    )
    first = cli("--json", "deploy", str(v3), "--skip-check", "--baseline", "skip")
    assert first.code == 0, first.stdout + first.stderr
    verdict = first.json()["hosts"][0]["verdict"]
    assert verdict["passed"] and verdict["summary"]["route"] == "/generate (streamed)"
    assert [p["concurrency"] for p in verdict["points"]] == [1, 4]
    assert [f"{g['name']}@{g['concurrency']}" for g in verdict["gates"]] == ["accept_length@1", "accept_length@4"]
    assert all(p["summary"]["ttft_s"] for p in verdict["points"])
    streamed = [r for r in fake_engine.generation_requests() if r.body and r.body.get("stream")]
    assert streamed and all(r.path == "/generate" and r.body["input_ids"] for r in streamed)
    fake_engine.on(version=5, accept_length=1.9)
    v5 = write_profile(local["profiles"] / "tiny-llama-v5.yaml", "tiny-llama-v3.yaml", 5)
    second = cli("--json", "deploy", str(v5), "--skip-check", "--baseline", "skip")
    assert second.code == 4, second.stdout + second.stderr
    failed = [(g["concurrency"], g["passed"]) for g in second.json()["hosts"][0]["verdict"]["gates"]]
    assert failed == [(1, False), (4, False)]


def test_an_engine_whose_chat_endpoint_has_no_counters_is_verified_on_generate(
    cli: Any, local: dict[str, Any], fake_engine: Any
) -> None:
    older = write_profile(local["profiles"] / "older.yaml", "tiny-llama-v1.yaml", 6, engine={"version": "0.5.12.post1"})
    done = cli("--json", "deploy", str(older), "--skip-check", "--baseline", "skip")
    assert done.code == 0, done.stdout + done.stderr
    [host] = done.json()["hosts"]
    assert host["verdict"]["passed"] and host["verdict"]["summary"]["route"] == "/generate"
    kept = local["root"] / "releases" / host["release"] / "prompt-ids.json"
    ids = json.loads(kept.read_text())["ids"]  # rendered on the host by the engine's tokenizer
    again = cli("--json", "verify", str(older), "--baseline", "skip")
    assert again.code == 0 and again.json()["hosts"][0]["verdict"]["summary"]["route"] == "/generate"
    assert json.loads(kept.read_text())["ids"] == ids


def test_drift_and_a_server_that_does_not_answer_fail_verify(cli: Any, local: dict[str, Any], fake_engine: Any) -> None:
    fake_engine.on(version=1, server_info={"speculative_num_steps": 5})
    drifted = cli("--json", "deploy", local["v1"], "--no-rollback", "--baseline", "skip")
    assert drifted.code == 1, drifted.stdout + drifted.stderr
    drift = drifted.json()["hosts"][0]["verdict"]["drift"]
    assert {"field": "speculative_num_steps", "expected": "3", "reported": "5"} in drift
    fake_engine.on(version=1, refuse={"/server_info"})  # the running server changes its answers
    refused = cli("--json", "verify", local["v1"], "--baseline", "skip")
    assert refused.code != 0
    [row] = refused.json()["hosts"][0]["verdict"]["drift"]
    assert row["field"] == "server" and "HTTP 500" in row["reported"]


def test_drift_reads_the_server_info_route_of_the_version(cli: Any, local: dict[str, Any], fake_engine: Any) -> None:
    """sglang serves /server_info from 0.5.6; before it only /get_server_info (the double serves what the
    emulated release serves), and drift must still read the server's arguments there."""
    older = write_profile(local["profiles"] / "older.yaml", "tiny-llama-v1.yaml", 7, engine={"version": "0.5.5"})
    fake_engine.on(version=7, server_info={"speculative_num_steps": 5})
    done = cli("--json", "deploy", str(older), "--skip-check", "--baseline", "skip", "--no-rollback")
    assert done.code == 1, done.stdout + done.stderr
    assert {"field": "speculative_num_steps", "expected": "3", "reported": "5"} in done.json()["hosts"][0]["verdict"][
        "drift"
    ]
    asked = {r.path for r in fake_engine.requests if r.path.endswith("server_info")}
    assert asked == {"/get_server_info"}


def test_a_failed_verify_restores_the_release_that_was_serving_verified_or_not(cli: Any, local: dict[str, Any]) -> None:
    """v1 verified, v3 deployed --no-verify and serving, v2 fails verify: v3 serves again, not v1 (the newest
    verified release), because v3 is what served when the deploy began."""
    assert cli("deploy", local["v1"]).code == 0
    v3 = write_profile(local["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3)
    serving = cli("--json", "deploy", str(v3), "--skip-check", "--no-verify").json()["hosts"][0]["release"]
    assert record(local, serving) == ("serving", "skipped")
    failed = cli("--json", "deploy", local["v2"], "--skip-check", "--baseline", "skip")
    assert failed.code == 4, failed.stdout + failed.stderr
    [host] = failed.json()["hosts"]
    assert host["rolled_back_to"] == serving and link(local) == serving
    assert host["rollback_verdict"]["passed"]  # verified again once restored
    assert record(local, serving) == ("serving", "verified")
    assert record(local, host["release"]) == ("rolled-back", "failed")
    status = cli("--json", "status", local["v1"]).json()["hosts"][0]
    assert status["record"]["life"] == "serving" and status["verification"].startswith("verified at ")


def test_a_first_deploy_that_fails_verify_has_nothing_to_restore(cli: Any, local: dict[str, Any]) -> None:
    first = cli("--json", "deploy", local["v2"], "--skip-check", "--baseline", "skip")
    assert first.code == 1, first.stdout + first.stderr
    [host] = first.json()["hosts"]
    assert not host["rolled_back_to"] and "no release served before this deploy" in host["detail"]
    assert link(local) == host["release"]


def test_for_people_one_hosts_gates_then_the_recap_and_a_rollback_says_its_verdict_once(
    cli: Any, local: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    first = cli("deploy", local["v1"])
    assert first.code == 0, first.stdout + first.stderr
    second = cli("deploy", local["v2"], "--skip-check")
    assert second.code == 4, second.stdout + second.stderr
    good, bad = (r["id"].rsplit("-", 1)[1] for r in cli("--json", "runs", "--kind", "deploy").json()["runs"])
    out = second.stdout.splitlines()
    assert all(len(line) <= 80 for line in out), second.stdout
    recap = out[out.index("deploy tiny-llama-demo v2") :]
    header, failed, again = (line.split() for line in recap[1:4])
    assert header == ["host", "release", "state", "accept", "length", "speedup", "verdict", "time"]
    assert failed[:4] == ["local", bad, "rolled", "back"] and failed[-3:-2] == ["FAIL"]
    assert again[:3] == [good, "serving", "again"] and again[-1] == "pass"
    assert any(line.startswith("local: accept_length ") and line.endswith(": FAIL") for line in recap), recap
    # the failing release's gates and the restored one's, each once, above the recap
    assert second.stdout.count("local: tiny-llama-demo v2 release") == 1
    assert second.stdout.count("local: tiny-llama-demo v1 release") == 1
    back = cli("rollback", local["v1"], "--to", bad)
    assert back.stdout.count("local: tiny-llama-demo v") == 1, back.stdout  # its verdict once


def kill_server(fake_engine: Any, release: str) -> None:
    """SIGKILL the double's server of `release` (a crashed server) and wait until it stops answering."""
    servers = [s for s in fake_engine.started(release=release) if s.alive]
    assert servers, f"no live server of {release}"
    for server in servers:
        os.kill(server.pid, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(s.alive for s in servers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(s.alive for s in servers)


def test_verify_on_a_killed_server_exits_3_and_records_nothing_about_the_release(
    cli: Any, local: dict[str, Any], fake_engine: Any
) -> None:
    """Issue 34: a verified release whose server crashed stays verified (rollback may pick it again);
    the verify run is `unreachable`, judged nothing, exit 3."""
    good = cli("--json", "deploy", local["v1"]).json()["hosts"][0]["release"]
    assert record(local, good) == ("serving", "verified")
    kill_server(fake_engine, good)
    done = cli("--json", "verify", local["v1"], "--baseline", "skip")
    assert done.code == 3, done.stdout + done.stderr
    [host] = done.json()["hosts"]
    assert not host["ok"] and "reached no server" in host["detail"] and "its server is not running" in host["detail"]
    assert "specctl rollback --to" in host["fix"]
    assert record(local, good) == ("serving", "verified")
    last = cli("--json", "runs").json()["runs"][-1]
    assert (last["kind"], last["status"], last["passed"]) == ("verify", "unreachable", None)
    assert "unreachable" in cli("runs").stdout


def test_a_deploy_over_a_current_whose_server_is_dead_does_not_claim_to_restore_it(
    cli: Any, local: dict[str, Any], fake_engine: Any
) -> None:
    """`current` names v1, whose server crashed: v2 fails its gate, and nothing ran before it to put
    back: v1 is not started as a "restore", and the result names what `current` held."""
    good = cli("--json", "deploy", local["v1"]).json()["hosts"][0]["release"]
    kill_server(fake_engine, good)
    failed = cli("--json", "deploy", local["v2"], "--skip-check", "--baseline", "skip")
    assert failed.code == 1, failed.stdout + failed.stderr
    [host] = failed.json()["hosts"]
    assert not host["rolled_back_to"] and f"current named {good}, whose server was not running" in host["detail"]
    assert len(fake_engine.started(release=good)) == 1  # never started again
    assert link(local) == host["release"] and record(local, good)[1] == "verified"


def test_a_deploy_whose_new_server_dies_before_verify_is_a_failed_start(
    cli: Any, local: dict[str, Any], fake_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ready, then gone when verify asks: not a verdict on the release (its verification stays none),
    a failed start (exit 3); what ran before is put back and verified again."""
    import specctl.flows.deploy as deploy_flow

    good = cli("--json", "deploy", local["v1"]).json()["hosts"][0]["release"]
    real = deploy_flow.verify_and_record

    def crash_first(rec: Any, session: Any, run_id: str, **options: Any) -> Any:
        kill_server(fake_engine, run_id)
        return real(rec, session, run_id, **options)

    monkeypatch.setattr(deploy_flow, "verify_and_record", crash_first)
    v3 = write_profile(local["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3)
    done = cli("--json", "deploy", str(v3), "--skip-check", "--baseline", "skip")
    assert done.code == 3, done.stdout + done.stderr
    [host] = done.json()["hosts"]
    assert "a failed start" in host["detail"] and host["rolled_back_to"] == good
    assert link(local) == good and record(local, good) == ("serving", "verified")
    runs = cli("--json", "runs", "--kind", "deploy").json()["runs"]
    new = runs[-1]["id"]
    assert record(local, new) == ("failed-start", "none")
