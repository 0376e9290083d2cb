"""`specctl demo` end to end: the product's own workflow on the `local` host with real servers and
real measurements (deploy v1, baseline, deploy v2 that fails verify and rolls back, runs, diff,
check), a work directory left to try the next commands in, and nothing left running."""

from __future__ import annotations

import json
import os
import socket
import time
from pathlib import Path
from typing import Any

import pytest
import yaml


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def nothing_listens(port: int) -> bool:
    """True once the port refuses connections; a stopped server's socket may outlive the `stop` that
    saw its process gone by a few milliseconds (it is closed as the process finishes exiting)."""
    deadline = time.monotonic() + 5.0
    while True:
        with socket.socket() as s:
            if s.connect_ex(("127.0.0.1", port)) != 0:
                return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)


@pytest.mark.lab  # the real reference engine: the product's own workflow, end to end
def test_demo_tells_the_whole_story_at_80_columns_and_starts_a_previous_demo_afresh(
    cli: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One demo for people at 80 columns, in its default work directory, where a previous demo left its
    files; the story it tells as data (what `--json` prints: test_the_json_demo_prints_the_result below);
    then the README's quick tour runs in that directory as written."""
    monkeypatch.setenv("COLUMNS", "80")
    port, work = free_port(), Path(os.environ["XDG_DATA_HOME"]) / "specctl" / "demo"
    work.mkdir(parents=True)
    (work / ".specctl-demo").touch()
    (work / "ledger.db").write_bytes(b"a previous demo's ledger")
    from specctl.flows import demo

    told: list[demo.DemoResult] = []
    run_demo = demo.run_demo
    monkeypatch.setattr(demo, "run_demo", lambda *a, **kw: told.append(run_demo(*a, **kw)) or told[-1])
    result = cli("demo", "--port", str(port))
    assert result.code == 0, result.stdout + result.stderr

    # what people read: each step as its command, then what that command would print
    out = result.stdout
    for command in (
        "$ specctl check",
        "$ specctl deploy",
        "$ specctl baseline",
        "--skip-check",
        "$ specctl watch",
        "--on-degraded plain",
        "$ specctl runs",
        "$ specctl diff",
        "$ specctl stop",
    ):
        assert command in out, command
    assert "rolled back to" in out and "capture-mismatch" in out and "drafter.layer_ids" in out
    assert "v2: wrong layers [-1, 1, 3]" in out and "speedup" in out and "degraded" in out
    assert f"specctl runs --ledger {work / 'ledger.db'}" in out
    assert nothing_listens(port)
    runs = cli("--json", "runs", "--ledger", str(work / "ledger.db")).json()["runs"]
    assert [r["kind"] for r in runs] == ["deploy", "baseline", "deploy", "rollback", "watch", "watch"]  # the old went
    table = cli("runs", "--ledger", str(work / "ledger.db"))
    assert table.code == 0 and "…" not in table.stdout and all(len(line) <= 80 for line in table.stdout.splitlines())

    # the same demo as data, as `--json` prints it
    [kept] = told
    data = json.loads(json.dumps(kept.to_dict(), default=str))
    steps = {s["step"]: s for s in data["steps"]}
    assert [s["step"] for s in data["steps"]] == [
        "check-v1",
        "deploy-v1",
        "baseline",
        "deploy-v2",
        "watch",
        "watch-shift",
        "runs",
        "diff",
        "check-v2",
        "stop",
    ]
    assert data["as_expected"] is True

    # v1 through the real deploy: verified on the accept-length gate, and its record says so
    [v1] = steps["deploy-v1"]["hosts"]
    gate = {g["name"]: g for g in v1["verdict"]["gates"]}["accept_length"]
    assert v1["ok"] and v1["verdict"]["passed"] and gate["threshold"] == 3.0 and gate["interval"]["estimate"] > 3.0
    state = work / "hosts" / "local" / "tiny-llama-demo"
    kept_record = json.loads((state / "releases" / v1["release"] / "record.json").read_text())
    assert kept_record["verification"]["state"] == "verified" and kept_record["verification"]["gates"][0]["low"] > 3.0
    # v2 deployed past its failing check: verify fails on accept length, the host rolls back to v1 by itself
    assert "--skip-check" in steps["deploy-v2"]["command"]
    [v2] = steps["deploy-v2"]["hosts"]
    gate = {g["name"]: g for g in v2["verdict"]["gates"]}["accept_length"]
    assert not v2["verdict"]["passed"] and gate["decided"] and gate["interval"]["high"] < 3.0
    assert v2["rolled_back_to"] == v1["release"] and v2["rollback_verdict"]["passed"]

    # watch: ok under chat traffic; degraded once it moves to document tasks, and the host serves plain
    [ok] = steps["watch"]["hosts"]
    assert ok["state"] == "ok" and ok["release"] == v1["release"] and ok["verdict"]["interval"]["estimate"] > 3.0
    [shifted] = steps["watch-shift"]["hosts"]
    assert shifted["state"] == "degraded" and shifted["verdict"]["interval"]["high"] < shifted["verdict"]["floor"]
    assert shifted["action"].startswith("plain: ")
    assert (state / "current").resolve().name == shifted["action"].split(": ", 1)[1]

    # the ledger: deploy, baseline, deploy (failed), rollback (its parent the failed deploy), the watches
    runs = steps["runs"]["runs"]
    assert [(r["kind"], r["status"]) for r in runs] == [
        ("deploy", "succeeded"),
        ("baseline", "succeeded"),
        ("deploy", "failed"),
        ("rollback", "succeeded"),
        ("watch", "succeeded"),
        ("watch", "succeeded"),
    ]
    assert runs[3]["parent"] == runs[2]["id"] and runs[0]["id"] == v1["release"]
    diff = steps["diff"]
    assert (diff["a"], diff["b"]) == (runs[0]["id"], runs[2]["id"])
    assert {r["field"]: (r["a"], r["b"]) for r in diff["profile"]}["drafter.layer_ids"] == (None, [-1, 1, 3])
    assert {r["field"]: (r["a"], r["b"]) for r in diff["capture"]}["ids"] == ([1, 3, 4], [-1, 1, 3])
    assert any("drafter-overlay" in line for c in diff["commands"] for line in c["changed"])
    assert steps["check-v1"]["ok"] and not steps["check-v2"]["ok"]
    assert "capture-mismatch" in {f["code"] for f in steps["check-v2"]["findings"]}

    # headline numbers: speedup measured against the baseline, shown but not gated
    summary = data["summary"]
    assert summary["v1"]["accept_length"] > 3.0 > summary["v2"]["accept_length"]
    assert summary["v1"]["speedup"] > summary["v2"]["speedup"] > 0 and summary["baseline"]["output_tokens_per_s"] > 0
    assert 0.0 < summary["v2"]["acceptance_rate"] < summary["v1"]["acceptance_rate"] < 1.0

    # the work directory has what the next commands need
    assert (work / "profiles" / "tiny-llama-v1.yaml").exists() and (work / "profiles" / "tiny-llama-v2.yaml").exists()
    inventory = yaml.safe_load((work / "hosts.yaml").read_text())
    assert inventory["hosts"]["local"]["root"] == str(work / "hosts" / "local")
    ledger = str(work / "ledger.db")
    assert all(
        f"--ledger {ledger}" in line
        for line in data["next"]
        if line.split()[1] in ("runs", "show", "diff", "deploy", "verify")
    )
    assert all(
        f"--inventory {work / 'hosts.yaml'}" in line
        for line in data["next"]
        if line.split()[1] in ("deploy", "status", "logs", "stop")
    )
    assert all(line in out for line in data["next"])  # the lines people read
    # ... and they work: the short ids the demo prints are accepted back
    show_line = next(line for line in data["next"] if line.split()[1] == "show")
    shown = cli("--json", *show_line.split()[1:])
    assert shown.code == 0 and shown.json()["id"] == runs[2]["id"]
    status = cli(
        "--json", "status", str(work / "profiles" / "tiny-llama-v1.yaml"), "--inventory", str(work / "hosts.yaml")
    )
    assert (
        status.code == 0
        and status.json()["hosts"][0]["current"] == shifted["action"].split(": ", 1)[1]
        and not status.json()["hosts"][0]["running"]
    )

    # the README's quick tour, every line as written from the repository root, in the demo's directory
    from tests.test_docs import run_tour

    assert run_tour(dict(os.environ)) == {}


def test_the_json_demo_prints_the_result(cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--json demo` prints the demo's result as data (the lab test above reads a real demo's result)."""
    from specctl.flows import demo

    told = demo.DemoResult(str(tmp_path), "ledger.db", "hosts.yaml", {"v1": "v1.yaml", "v2": "v2.yaml"})
    told.steps.append(demo.DemoStep("check-v1", "specctl check v1.yaml", {"ok": True, "findings": []}))
    told.summary = {
        "v1": {"passed": True, "accept_length": 3.5},
        "v2": {"passed": False, "rolled_back_to": "r1"},
        "watch": {"state": "ok"},
        "watch-shift": {"state": "degraded", "action": "plain: r3"},
    }
    told.next_commands.append("specctl runs --ledger ledger.db")
    monkeypatch.setattr(demo, "run_demo", lambda *a, **kw: told)
    result = cli("--json", "demo", "--workdir", str(tmp_path), "--port", str(free_port()))
    assert result.code == 0, result.stdout + result.stderr
    assert result.json() == told.to_dict() and result.json()["as_expected"] is True
    [step] = result.json()["steps"]
    assert step == {"step": "check-v1", "command": "specctl check v1.yaml", "ok": True, "findings": []}


def test_without_torch_the_demo_says_how_to_get_it_before_starting(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    work = tmp_path / "work"
    result = cli("demo", "--workdir", str(work), "--port", str(free_port()))
    assert result.code == 2
    assert "needs torch" in result.stderr and "pip install 'specctl[reference]'" in result.stderr
    assert not work.exists()  # nothing started, nothing written
    data = cli("--json", "demo", "--workdir", str(work)).json()
    assert data["error"]["type"] == "InputError" and data["error"]["fix"] == "pip install 'specctl[reference]'"


def test_the_demo_refuses_a_directory_it_did_not_make(cli: Any, tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("mine")
    result = cli("demo", "--workdir", str(tmp_path), "--port", str(free_port()))
    assert result.code == 2 and "not a demo work directory" in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]


def test_fewer_than_8_requests_is_a_usage_error(cli: Any, tmp_path: Path) -> None:
    assert cli("demo", "--workdir", str(tmp_path), "--requests", "6").code == 2
