"""The seed scenario on a real OpenSSH host with the reference engine: v1 (trained layers) is
deployed and verified (its record says so); v2 (same-width wrong layers, static check bypassed)
fails verify on accept length and rolls back by itself; the ledger tells it all, `diff` names the
capture ids, and a planted secret reaches neither the ledger nor the host's files. Then SIGTERM in
the middle of a deploy: the run is closed as killed and the host keeps a `current`."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import yaml

from specctl.engines.reference.roofline import ENV as ROOFLINE_ENV
from specctl.engines.reference.tokenizer import BOS_ID
from specctl.flows.demo import write_inputs
from specctl.verdict.workload import load_workload
from tests.integration.sshd import SshLab

NAME = "seed-demo"
SECRET = "hf_s3cr3t-planted-by-the-test-0451"


def _profiles(tmp_path: Path, port: int, host: str) -> tuple[Path, Path]:
    v1, v2 = write_inputs(tmp_path, port)
    for path in (v1, v2):
        data = yaml.safe_load(path.read_text())
        data["metadata"]["name"] = NAME
        if path == v1:
            data["engine"]["host"] = "0.0.0.0"
            data["hosts"] = [host]
            data["secrets"] = ["SEED_TOKEN"]
            data["verify"] = {
                "workload": "chat-small",
                "requests": 24,
                "max_new_tokens": 64,
                # speedup on a shared 2-core CPU swings (v1 1.1-1.7x): the gate sits low so
                # that v1 passes; accept length is what tells v2 apart (1.9 against 3.5)
                "min_accept_length": 3.0,
                "min_speedup": 0.8,
            }
        path.write_text(yaml.safe_dump(data, sort_keys=False))
    return v1, v2


def _link(lab: SshLab, host: str, link: str) -> str | None:
    path = lab.hosts[host].root / NAME / link
    return path.resolve().name if path.is_symlink() else None


def _life(lab: SshLab, host: str, run_id: str) -> tuple[str, str]:
    """(life, verification) of a release, as its record on the host says."""
    data = json.loads((lab.hosts[host].root / NAME / "releases" / run_id / "record.json").read_text())
    return data["life"], data["verification"]["state"]


def test_seed_scenario(cli: Any, lab: SshLab, tmp_path: Path, monkeypatch: Any) -> None:
    v1, v2 = _profiles(tmp_path, 31720, "h2")
    monkeypatch.setenv("SEED_TOKEN", SECRET)
    inventory = lab.inventory(tmp_path / "hosts.yaml", sys.executable)
    ledger = tmp_path / "ledger.db"
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config), "--ledger", str(ledger)]

    first = cli("--json", "deploy", str(v1), *common)
    assert first.code == 0, first.stdout + first.stderr
    [h1] = first.json()["hosts"]
    assert h1["verdict"]["passed"] and not h1["verdict"]["drift"]
    good = h1["release"]
    assert _link(lab, "h2", "current") == good and _life(lab, "h2", good) == ("serving", "verified")

    second = cli("--json", "deploy", str(v2), "--skip-check", *common)
    assert second.code == 4, second.stdout + second.stderr
    [h2] = second.json()["hosts"]
    gates = {g["name"]: g for g in h2["verdict"]["gates"]}
    assert not gates["accept_length"]["passed"] and gates["accept_length"]["decided"]
    assert gates["accept_length"]["interval"]["high"] < 3.0
    # the wrong layers are slower relative to the same baseline than the right ones
    v1_speedup = {g["name"]: g for g in h1["verdict"]["gates"]}["speedup"]["interval"]["estimate"]
    assert gates["speedup"]["interval"]["estimate"] < v1_speedup
    assert h2["rolled_back_to"] == good and h2["rollback_verdict"]["passed"]
    assert _link(lab, "h2", "current") == good and _life(lab, "h2", good) == ("serving", "verified")
    assert _life(lab, "h2", h2["release"]) == ("rolled-back", "failed")

    runs = cli("--json", "runs", "--ledger", str(ledger)).json()["runs"]
    # the first deploy's verify found no baseline and ran one (--baseline auto) inside it
    assert [(r["kind"], r["status"]) for r in runs] == [
        ("deploy", "succeeded"),
        ("baseline", "succeeded"),
        ("deploy", "failed"),
        ("rollback", "succeeded"),
    ]
    deploy1, baseline, deploy2, rollback = runs
    assert rollback["parent"] == deploy2["id"] and deploy1["id"] == good
    assert baseline["output_tokens_per_s"] and deploy1["accept_length"] > 3.0 > deploy2["accept_length"]

    diff = cli("--json", "diff", deploy1["id"], deploy2["id"], "--ledger", str(ledger)).json()
    changed = {row["field"]: (row["a"], row["b"]) for row in diff["profile"]}
    assert changed["drafter.layer_ids"] == (None, [-1, 1, 3])
    assert any(row["field"].startswith("drafter_ids") or "ids" in row["field"] for row in diff["capture"])
    assert any("drafter-overlay" in line for c in diff["commands"] for line in c["changed"])

    shown = cli("show", rollback["id"], "--ledger", str(ledger))
    assert shown.code == 0 and "PASS" in shown.stdout
    report = tmp_path / "trend.html"
    plot = cli("runs", "--plot", "--plot-file", str(report), "--ledger", str(ledger))
    assert plot.code == 0 and NAME in plot.stdout and "<svg" in report.read_text()

    # each release directory keeps its own record of the runs that touched it
    records = sorted(p.name for p in (lab.hosts["h2"].root / NAME / "releases" / good / "runs").iterdir())
    assert f"{deploy1['id']}.json" in records and f"{rollback['id']}.json" in records

    # the planted secret reached the server's environment only: not the ledger, not a file on the host
    stored = b"".join(p.read_bytes() for p in tmp_path.glob("ledger.db*"))
    assert stored and SECRET.encode() not in stored
    for path in lab.hosts["h2"].root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            assert SECRET.encode() not in path.read_bytes(), path
    # and by hand: back to v1 by profile@version (it restarts and verifies again)
    manual = cli("--json", "rollback", "--to", f"{NAME}@1", "--host", "h2", *common)
    assert manual.code == 0, manual.stdout + manual.stderr
    assert manual.json()["hosts"][0]["verdict"]["passed"] and _link(lab, "h2", "current") == good
    # its server killed (a crash): verify reaches no server, exit 3, the release stays verified, the
    # run is `unreachable` (issue 34; before: recorded `failed`, exit 1)
    group = int((lab.hosts["h2"].root / NAME / "releases" / good / "server.pid").read_text())
    os.killpg(group, signal.SIGKILL)  # the server this test's deploy started
    deadline = time.monotonic() + 10
    while _group_alive(group) and time.monotonic() < deadline:
        time.sleep(0.05)
    dead = cli("--json", "verify", str(v1), "--baseline", "ledger", *common)
    assert dead.code == 3, dead.stdout + dead.stderr
    assert "reached no server" in dead.json()["hosts"][0]["detail"]
    assert _life(lab, "h2", good) == ("serving", "verified")
    last = cli("--json", "runs", "--ledger", str(ledger)).json()["runs"][-1]
    assert (last["kind"], last["status"], last["passed"]) == ("verify", "unreachable", None)
    cli("stop", str(v1), *common[:4])


def _group_alive(group: int) -> bool:
    """Whether a process of the group lives (a zombie does not)."""
    for proc in Path("/proc").iterdir():
        try:
            fields = (proc / "stat").read_text().rsplit(") ", 1)[1].split() if proc.name.isdigit() else []
        except (OSError, IndexError):
            continue
        if fields and int(fields[2]) == group and fields[0] != "Z":
            return True
    return False


def test_sigterm_mid_deploy_closes_the_run_as_killed(cli: Any, lab: SshLab, tmp_path: Path, monkeypatch: Any) -> None:
    v1, _ = _profiles(tmp_path, 31730, "h1")
    monkeypatch.setenv("SEED_TOKEN", SECRET)  # named in its secrets: (a deploy without it is refused at prove)
    inventory = lab.inventory(tmp_path / "hosts.yaml", sys.executable)
    ledger = tmp_path / "ledger.db"
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config), "--ledger", str(ledger)]
    assert cli("deploy", str(v1), "--no-verify", *common).code == 0
    before = _link(lab, "h1", "current")
    hang = tmp_path / "hang.sh"
    # the interpreter for the facts and the proof; its launch hangs
    hang.write_text(f'#!/bin/sh\n[ "${{1:-}}" = -m ] && exec sleep 600\nexec {sys.executable} "$@"\n')
    hang.chmod(0o755)
    stuck = tmp_path / "profiles" / "stuck.yaml"
    stuck.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": "tiny-llama-v1.yaml",
                "metadata": {"name": NAME, "version": 7},
                "engine": {"python": str(hang)},
            }
        )
    )
    child = subprocess.Popen(
        [sys.executable, "-m", "specctl", "deploy", str(stuck), "--skip-check", *common],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "NO_COLOR": "1"},
    )
    assert child.stderr is not None
    deadline = time.monotonic() + 60
    for line in child.stderr:  # wait until it waits for readiness: old server stopped, new one started
        if "h1: starting" in line or time.monotonic() > deadline:
            break
    child.send_signal(signal.SIGTERM)
    child.communicate(timeout=120)
    assert child.returncode == 128 + signal.SIGTERM
    runs = cli("--json", "runs", "--ledger", str(ledger)).json()["runs"]
    assert [(r["kind"], r["status"]) for r in runs] == [("deploy", "succeeded"), ("deploy", "killed")]
    assert _link(lab, "h1", "current") == before  # never without a current
    assert not (lab.hosts["h1"].root / NAME / "lock").exists()
    status = cli("--json", "status", str(v1), *common[:4]).json()["hosts"][0]
    assert status["current"] == before and status["running"]  # the previous release was started again
    again = cli("deploy", str(v1), "--no-verify", *common)  # the next deploy works
    assert again.code == 0, again.stderr
    cli("stop", str(v1), *common[:4])


def test_verify_on_an_engine_whose_chat_endpoint_has_no_counters(cli: Any, lab: SshLab, tmp_path: Path) -> None:
    # the reference engine emulating sglang 0.5.12.post1 answers chat requests without meta_info, as
    # that release did: verify renders the workload with the host's tokenizer and asks /generate
    v1, _ = write_inputs(tmp_path, 31740)
    data = yaml.safe_load(v1.read_text())
    data["metadata"]["name"] = "older-engine"
    data["engine"].update({"version": "0.5.12.post1", "host": "0.0.0.0"})
    data["hosts"] = ["h2"]
    data["verify"].update({"requests": 8, "max_new_tokens": 32, "min_accept_length": 2.5})
    v1.write_text(yaml.safe_dump(data, sort_keys=False))
    inventory = lab.inventory(tmp_path / "hosts.yaml", sys.executable)
    common = [
        "--inventory",
        str(inventory),
        "--ssh-config",
        str(lab.ssh_config),
        "--ledger",
        str(tmp_path / "ledger.db"),
    ]
    try:
        done = cli("--json", "deploy", str(v1), *common)
        assert done.code == 0, done.stdout + done.stderr
        [host] = done.json()["hosts"]
        verdict = host["verdict"]
        assert verdict["passed"] and verdict["summary"]["route"] == "/generate"
        gates = {g["name"]: g for g in verdict["gates"]}
        assert gates["accept_length"]["passed"] and gates["accept_length"]["interval"]["estimate"] > 2.5
        kept = lab.hosts["h2"].root / "older-engine" / "releases" / host["release"] / "prompt-ids.json"
        ids = json.loads(kept.read_text())["ids"]
        assert len(ids) == len(load_workload("chat-small").requests) and ids[0][0] == BOS_ID
        # a second verify reads the kept rendering: same ids, same route
        again = cli("--json", "verify", str(v1), *common)
        assert again.code == 0 and again.json()["hosts"][0]["verdict"]["summary"]["route"] == "/generate"
        assert json.loads(kept.read_text())["ids"] == ids
    finally:
        cli("stop", str(v1), *common[:4])


def test_operating_points_streamed_on_a_real_host(cli: Any, lab: SshLab, tmp_path: Path) -> None:
    """The seed scenario at concurrency 1 and 16, streamed: v1 passes at both points, and a profile
    drafting 10 steps keeps its speedup alone but loses it at 16 (the verify forward of 16 x 11 tokens
    costs more than the accepted drafts save), shown with both numbers. The engine keeps a GPU's time per
    forward (the roofline stand-in: flat to 32 tokens, then per token), so the loss at 16 comes from the
    mechanism that causes it on a GPU; its times (20 ms a forward, 3 ms a token past 32) stay above the
    CPU's own on a busy machine (at 8 ms and 0.5 ms, another test worker's load made the baseline slower
    than the roofline and v3 "kept" a 1.5x speedup at 16). Client-side time to first token agrees with
    the server's first_token_latency."""
    v1, v2 = write_inputs(tmp_path, 31750)
    data = yaml.safe_load(v1.read_text())
    data["metadata"]["name"] = "points"
    data["engine"].update(
        {
            "host": "0.0.0.0",
            "args": {"enable-metrics": True},
            "env": {ROOFLINE_ENV: "floor_ms=20,knee_tokens=32,token_ms=3"},
        }
    )
    data["hosts"] = ["h1"]
    data["verify"].update(
        {"requests": 16, "max_new_tokens": 48, "concurrency": [1, 16], "stream": True, "min_accept_length": 3.0}
    )
    v1.write_text(yaml.safe_dump(data, sort_keys=False))
    v2_data = yaml.safe_load(v2.read_text())
    v2_data["metadata"]["name"] = "points"
    v2.write_text(yaml.safe_dump(v2_data, sort_keys=False))
    v3 = tmp_path / "profiles" / "tiny-llama-v3.yaml"
    v3.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": "tiny-llama-v1.yaml",
                "metadata": {"name": "points", "version": 3},
                "speculative": {"num_steps": 10, "num_draft_tokens": 11},
                "verify": {"min_accept_length": None, "min_speedup": 0.9},
            }
        )
    )
    inventory = lab.inventory(tmp_path / "hosts.yaml", sys.executable)
    ledger = tmp_path / "ledger.db"
    common = ["--inventory", str(inventory), "--ssh-config", str(lab.ssh_config), "--ledger", str(ledger)]
    try:
        first = cli("--json", "deploy", str(v1), "--baseline", "skip", *common)
        assert first.code == 0, first.stdout + first.stderr
        verdict = first.json()["hosts"][0]["verdict"]
        assert verdict["passed"] and verdict["summary"]["route"] == "/generate (streamed)"
        assert [p["concurrency"] for p in verdict["points"]] == [1, 16]
        assert [g["name"] + "@" + str(g["concurrency"]) for g in verdict["gates"]] == [
            "accept_length@1",
            "accept_length@16",
        ]
        for point in verdict["points"]:
            assert point["summary"]["ttft_s"] and point["summary"]["inter_token_latency_s"]
        # the client sees the first token after the server produced it, and before the request ends
        run = cli("--json", "show", first.json()["hosts"][0]["release"], "--ledger", str(ledger)).json()
        requests = [r for p in run["host_records"][0]["measurements"]["points"] for r in p["requests"]]
        assert len(requests) >= 16
        for r in requests:
            assert r["first_token_latency"] - 0.01 <= r["client_first_token"] <= r["client_latency"], r
        assert f"{ROOFLINE_ENV}: a target forward takes at least 20 ms" in cli("logs", str(v1), *common[:4]).stdout

        # v2 (wrong layers) failing at every point is tested on the engine double: tests/flows/test_verify_flows.py
        third = cli("deploy", str(v3), *common)
        assert third.code == 4, third.stdout + third.stderr
        shown = third.stdout + third.stderr
        rows = [line.strip("│┃ ") for line in shown.splitlines()]
        speedups = {row.split()[1]: row for row in rows if row.startswith("speedup @")}
        assert set(speedups) == {"@1", "@16"}, shown
        assert "pass" in speedups["@1"] and "FAIL" in speedups["@16"]
    finally:
        cli("stop", str(v1), *common[:4])
