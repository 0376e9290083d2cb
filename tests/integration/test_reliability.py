"""No fault leaves a host broken (the invariant every stage keeps): whatever fails, each host ends
with `current` naming a release whose server runs, or with no server of the profile running and
`status` saying so; never a server nobody tracks. Real sshd hosts, the reference engine."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.flows import change
from specctl.flows.demo import write_inputs
from specctl.hosts import _ssh_runner
from specctl.processes import start_time
from tests.integration.conftest import lab_profile, reset_lab
from tests.integration.sshd import SshLab

PORT = 31700
NAME = "tiny-llama-demo"

# an HTTP server that says 200 to everything with a body that is not JSON: "healthy", and useless
FAKE_ENGINE = """#!{python}
import os, sys
if sys.argv[1:2] != ["-m"]:  # not the launch (the facts, the proof): the interpreter itself
    os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
from http.server import BaseHTTPRequestHandler, HTTPServer
port = int(sys.argv[sys.argv.index("--port") + 1])
class H(BaseHTTPRequestHandler):
    def _answer(self):
        body = b"OK, not json"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = _answer
    def log_message(self, *args):
        pass
print("fake engine: fired up and ready to roll", flush=True)
HTTPServer(("0.0.0.0", port), H).serve_forever()
"""


@pytest.fixture
def env(lab: SshLab, tmp_path: Path) -> Iterator[dict[str, Any]]:
    setup = lab_profile(lab, tmp_path, PORT)
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 6\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    fake = tmp_path / "fake-engine"
    fake.write_text(FAKE_ENGINE.format(python=sys.executable))
    fake.chmod(0o755)
    yield {**setup, "ledger": str(tmp_path / "ledger.db"), "slow": str(slow), "fake": str(fake)}
    reset_lab(lab)


def variant(env: dict[str, Any], version: int, **engine: Any) -> str:
    """v1 with another version number and engine fields."""
    path = Path(env["tmp"]) / "profiles" / f"v{version}.yaml"
    body: dict[str, Any] = {
        "apiVersion": "specctl/v1",
        "kind": "Profile",
        "extends": "tiny-llama-v1.yaml",
        "metadata": {"name": NAME, "version": version},
    }
    if engine:
        body["engine"] = engine
    path.write_text(yaml.safe_dump(body))
    return str(path)


def current(lab: SshLab, host: str) -> str | None:
    link = lab.hosts[host].root / NAME / "current"
    return os.readlink(link).rsplit("/", 1)[-1] if link.is_symlink() else None


def in_background(fn: Callable[[], Any]) -> tuple[threading.Thread, list[Any]]:
    out: list[Any] = []
    worker = threading.Thread(target=lambda: out.append(fn()))
    worker.start()
    return worker, out


def wait_for(condition: Callable[[], bool], within_s: float, what: str) -> None:
    deadline = time.monotonic() + within_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def new_release_started(lab: SshLab, host: str, before: set[str]) -> Callable[[], bool]:
    releases = lab.hosts[host].root / NAME / "releases"
    return lambda: any((p / "server.pid").exists() for p in releases.iterdir() if p.name not in before)


def start_step_ended(ledger: str) -> Callable[[], bool]:
    """The running deploy recorded its start step as ended (its undo exists from then on)."""
    from specctl.ledger.ledger import Ledger

    def ended() -> bool:
        if not Path(ledger).exists():
            return False
        book = Ledger(Path(ledger), readonly=True)
        try:
            runs = book.runs(kind="deploy")
            return bool(runs) and ("start", "ended") in {(e.step, e.event) for e in book.events(runs[-1].id)}
        finally:
            book.close()

    return ended


def release_ids(lab: SshLab, host: str) -> set[str]:
    releases = lab.hosts[host].root / NAME / "releases"
    return {p.name for p in releases.iterdir()} if releases.exists() else set()


def status_of(cli: Any, env: dict[str, Any], host: str) -> dict[str, Any]:
    result = cli("--json", "status", env["v1"], "--hosts", host, *env["common"])
    assert result.code == 0, result.stdout + result.stderr
    row: dict[str, Any] = result.json()["hosts"][0]
    return row


def assert_invariant(cli: Any, env: dict[str, Any], lab: SshLab, host: str) -> dict[str, Any]:
    """`current` names a running server and nothing else of the profile runs, or nothing runs."""
    row = status_of(cli, env, host)
    others = [s for s in row["servers"] if not s["current"]]
    assert not others, f"untracked servers on {host}: {others}"
    assert row["current"] == current(lab, host)
    return row


def test_connection_lost_during_readiness_and_back(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    common = [*env["common"], "--hosts", "h0", "--ledger", env["ledger"]]
    assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
    before = release_ids(lab, "h0")
    worker, out = in_background(
        lambda: cli("--json", "deploy", variant(env, 2, python=env["slow"]), "--no-verify", *common)
    )
    wait_for(new_release_started(lab, "h0", before), 30, "the new server to start")
    time.sleep(1)  # the start command returns just after the pid file is written (a broken start is another test)
    lab.kill_sshd(lab.hosts["h0"])  # while the deploy polls readiness
    time.sleep(2)
    lab.start_sshd(lab.hosts["h0"])
    worker.join(timeout=120)
    [result] = out
    assert result.code == 0, result.stdout + result.stderr
    [row] = result.json()["hosts"]
    assert row["ok"] and current(lab, "h0") == row["release"] and row["release"] not in before
    state = assert_invariant(cli, env, lab, "h0")
    assert state["running"] and state["healthy"]
    events = cli("--json", "show", row["release"], "--ledger", env["ledger"]).json()["events"]
    assert [(e["host"], e["step"], e["event"]) for e in events if e["event"] != "began"] == [
        ("h0", stage, "ended")
        for stage in ("preflight", "materialise", "prove", "stop-previous", "start", "ready", "switch")
    ]
    shown = cli("show", row["release"], "--ledger", env["ledger"])
    assert shown.code == 0 and "steps" in shown.stdout and "stop-previous" in shown.stdout


def test_connection_lost_for_good_leaves_no_untracked_server(
    cli: Any, lab: SshLab, env: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    # the host never comes back while the deploy runs: the pauses between attempts to connect (0.5, 1,
    # 2 s: 3.5 s for each command sent) are shortened, and with them the time a started release waits
    # past its start-up budget to be made current (30 s) before its server stops itself
    monkeypatch.setattr(_ssh_runner, "BACKOFF_S", 0.1)
    monkeypatch.setattr(change, "CONFIRM_MARGIN_S", 15.0)
    common = [*env["common"], "--hosts", "h1", "--ledger", env["ledger"]]
    assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
    previous = current(lab, "h1")
    before = release_ids(lab, "h1")
    worker, out = in_background(
        lambda: cli(
            "--json", "deploy", variant(env, 2, python=env["slow"]), "--no-verify", "--startup-timeout", "8", *common
        )
    )
    wait_for(new_release_started(lab, "h1", before), 30, "the new server to start")
    wait_for(start_step_ended(env["ledger"]), 30, "the start step to end")  # cut while readiness is polled
    lab.kill_sshd(lab.hosts["h1"])  # and it stays down until the deploy gave up
    worker.join(timeout=180)
    [result] = out
    assert result.code == 3, result.stdout + result.stderr
    [row] = result.json()["hosts"]
    assert not row["ok"] and "undoing" in row["detail"] and "cannot connect" in row["detail"]
    run = cli("--json", "runs", "--ledger", env["ledger"], "--kind", "deploy").json()["runs"][-1]["id"]
    events = {(e["step"], e["event"]) for e in cli("--json", "show", run, "--ledger", env["ledger"]).json()["events"]}
    assert {
        ("start", "undo-failed"),
        ("stop-previous", "undo-failed"),
    } <= events  # recorded: the host could not be put back
    lab.start_sshd(lab.hosts["h1"])
    [new] = release_ids(lab, "h1") - before
    state = status_of(cli, env, "h1")
    assert (
        state["current"] == previous and not state["running"]
    )  # the previous server was stopped, the switch never came
    stray = [s for s in state["servers"] if not s["current"]]
    if stray:  # the new server still runs, tracked: status names it and when it stops itself
        assert [s["release"] for s in stray] == [new] and stray[0]["confirm_by"]
        wait_for(lambda: not status_of(cli, env, "h1")["servers"], 60, "the unconfirmed server to stop itself")
        assert (
            "was not made current by its deadline"
            in (lab.hosts["h1"].root / NAME / "releases" / new / "server.log").read_text()
        )
    state = assert_invariant(cli, env, lab, "h1")
    assert not state["running"] and "not running" in state["state"]
    # the lock could not be released on a host that was gone; its holder is this very test process, whose
    # run is over: the next deploy takes the lock over, and says so
    again = cli("deploy", env["v1"], "--no-verify", *common)
    assert again.code == 0, again.stdout + again.stderr
    assert "took over the lock of" in again.stderr and "its run is over" in " ".join(again.stderr.split())


def test_a_health_answer_that_is_not_json_is_a_failed_verify_and_rolled_back(
    cli: Any, lab: SshLab, env: dict[str, Any]
) -> None:
    common = [*env["common"], "--hosts", "h2", "--ledger", env["ledger"]]
    good = cli("--json", "deploy", env["v1"], *common)
    assert good.code == 0, good.stdout + good.stderr
    serving = current(lab, "h2")
    result = cli("--json", "deploy", variant(env, 3, python=env["fake"]), *common)
    assert result.code == 4, result.stdout + result.stderr
    [row] = result.json()["hosts"]
    assert row["rolled_back_to"] == serving and not row["verdict"]["passed"]
    assert current(lab, "h2") == serving
    state = assert_invariant(cli, env, lab, "h2")
    assert state["healthy"]


def test_rollback_is_refused_while_a_deploy_holds_the_lock(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    common = [*env["common"], "--hosts", "h0", "--ledger", env["ledger"]]
    first = cli("--json", "deploy", env["v1"], "--no-verify", *common)
    assert first.code == 0
    target = first.json()["hosts"][0]["release"]
    before = release_ids(lab, "h0")
    worker, out = in_background(
        lambda: cli("--json", "deploy", variant(env, 2, python=env["slow"]), "--no-verify", *common)
    )
    wait_for(new_release_started(lab, "h0", before), 30, "the new server to start")
    refused = cli("--json", "rollback", NAME, "--to", target, *common)
    assert refused.code == 3, refused.stdout + refused.stderr
    assert "is locked by" in refused.stdout and "its process is running" in refused.stdout
    worker.join(timeout=120)
    assert out[0].code == 0, out[0].stdout + out[0].stderr
    assert_invariant(cli, env, lab, "h0")


def test_unlock_refuses_a_live_holder_unless_forced(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    common = [*env["common"], "--hosts", "h1", "--ledger", env["ledger"]]
    base = lab.hosts["h1"].root / NAME
    base.mkdir(parents=True, exist_ok=True)
    holder = subprocess.Popen(["sleep", "120"])  # another command of this machine, still running
    me = {
        "user": "ci",
        "machine": socket.gethostname(),
        "pid": holder.pid,
        "started": start_time(holder.pid),
        "run_id": "x",
        "command": "specctl deploy",
        "since": "2026-11-30T10:00:00Z",
    }
    (base / "lock").write_text(json.dumps(me))
    try:
        refused = cli("unlock", env["v1"], *common)
        assert refused.code == 3 and "its process is running" in refused.stderr and (base / "lock").exists()
        forced = cli("unlock", env["v1"], "--force", *common)
        assert forced.code == 0 and not (base / "lock").exists()
    finally:
        holder.kill()
        holder.wait()
    gone = subprocess.run(
        ["sh", "-c", "echo $$"], capture_output=True, text=True
    ).stdout.strip()  # a pid that has exited
    (base / "lock").write_text(json.dumps({**me, "pid": int(gone)}))
    stale = cli("unlock", env["v1"], *common)
    assert stale.code == 0 and "its process is gone" in stale.stdout and not (base / "lock").exists()


def test_rollback_to_a_release_that_is_not_whole_stops_nothing(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    common = [*env["common"], "--hosts", "h2", "--ledger", env["ledger"]]
    good = cli("--json", "deploy", env["v1"], *common)
    assert good.code == 0, good.stdout + good.stderr
    target = good.json()["hosts"][0]["release"]
    assert cli("deploy", variant(env, 2), "--no-verify", *common).code == 0
    serving = current(lab, "h2")
    (lab.hosts["h2"].root / NAME / "releases" / target / "launch.sh").unlink()
    result = cli("rollback", NAME, "--to", target, *common)
    assert result.code == 3, result.stdout + result.stderr
    assert "is not whole" in result.stderr and "launch.sh" in result.stderr
    assert current(lab, "h2") == serving
    state = assert_invariant(cli, env, lab, "h2")
    assert state["healthy"]


def test_stop_finds_a_server_that_current_does_not_name(cli: Any, lab: SshLab, env: dict[str, Any]) -> None:
    common = [*env["common"], "--hosts", "h0", "--ledger", env["ledger"]]
    assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
    (lab.hosts["h0"].root / NAME / "current").unlink()
    state = status_of(cli, env, "h0")
    assert state["current"] is None and [s["current"] for s in state["servers"]] == [False]
    stopped = cli("--json", "stop", env["v1"], *common[:-2])
    assert stopped.code == 0 and stopped.json()["stopped"] == {"h0": True}
    wait_for(lambda: status_of(cli, env, "h0")["servers"] == [], 10, "the stopped server to be gone")


def test_a_deleted_current_release_does_not_hide_the_deploys_own_failure(
    cli: Any, lab: SshLab, env: dict[str, Any]
) -> None:
    common = [*env["common"], "--hosts", "h1", "--ledger", env["ledger"]]
    assert cli("deploy", env["v1"], "--no-verify", *common).code == 0
    old = current(lab, "h1")
    subprocess.run(["rm", "-rf", str(lab.hosts["h1"].root / NAME / "releases" / old)], check=True)
    broken = Path(env["tmp"]) / "profiles" / "broken.yaml"
    broken.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": "tiny-llama-v1.yaml",
                "metadata": {"name": NAME, "version": 9},
                "drafter": {"layer_ids": [1, 3, 9]},
            }
        )
    )
    result = cli("--json", "deploy", str(broken), "--skip-check", *common)
    assert result.code == 3, result.stdout + result.stderr
    [row] = result.json()["hosts"]
    assert row["detail"].startswith("h1: the server exited during start-up"), row["detail"]
    assert "restoring" not in row["detail"] or "failed" in row["detail"]
    assert row["log_tail"]
    state = status_of(cli, env, "h1")
    assert state["servers"] == [] and not state["running"]  # the old server (its files gone) was found and stopped


def test_a_ledger_that_fills_up_mid_deploy_leaves_the_host_on_its_previous_release(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the local host's state root is ~/.specctl/hosts/local
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    full = tmp_path / "ledger-fs"
    full.mkdir()
    if (
        subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(full)], capture_output=True).returncode
        != 0
    ):
        pytest.skip("cannot mount a tmpfs here")
    v1, _ = write_inputs(tmp_path / "work", PORT + 1)  # the local host, no SSH: the ledger is the fault here
    slow = tmp_path / "slow-python"
    slow.write_text(f'#!/bin/sh\nsleep 4\nexec {sys.executable} "$@"\n')
    slow.chmod(0o755)
    v2 = v1.parent / "v2.yaml"
    v2.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "specctl/v1",
                "kind": "Profile",
                "extends": v1.name,
                "metadata": {"name": NAME, "version": 2},
                "engine": {"python": str(slow)},
            }
        )
    )
    ledger = full / "ledger.db"
    root = Path.home() / ".specctl" / "hosts" / "local" / NAME
    try:
        first = cli("--json", "deploy", str(v1), "--no-verify", "--ledger", str(ledger))
        assert first.code == 0, first.stdout + first.stderr
        good = first.json()["hosts"][0]["release"]
        before = {p.name for p in (root / "releases").iterdir()}
        worker, out = in_background(lambda: cli("deploy", str(v2), "--no-verify", "--ledger", str(ledger)))
        wait_for(
            lambda: any((p / "server.pid").exists() for p in (root / "releases").iterdir() if p.name not in before),
            30,
            "the new server to start",
        )
        subprocess.run(
            ["dd", "if=/dev/zero", f"of={full / 'filler'}", "bs=64k"], capture_output=True
        )  # until the disk is full
        worker.join(timeout=120)
        [result] = out
        assert result.code == 2, result.stdout + result.stderr  # the ledger's error, named
        assert str(ledger) in result.stderr and "full" in result.stderr
        assert os.readlink(root / "current").rsplit("/", 1)[-1] == good  # walked back to the previous release
        state = cli("--json", "status", str(v1)).json()["hosts"][0]
        assert state["current"] == good and state["healthy"] and [s["release"] for s in state["servers"]] == [good]
    finally:
        cli("stop", str(v1))
        subprocess.run(["umount", str(full)], capture_output=True)
