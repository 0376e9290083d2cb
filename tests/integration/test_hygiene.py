"""A test run stopped by SIGTERM or by one SIGINT leaves nothing behind (tests/_hygiene.py).

Each case runs pytest in a child process on a purpose-built test file: the real `lab` fixture (three
sshd hosts in network namespaces of their own), a fixture with a network namespace of its own and a
process in a session of its own inside it, and a test that blocks (sleeping, or in the middle of an
in-process deploy waiting for a server that never becomes ready). Once the test runs, the child pytest
gets the signal; it must end promptly, and every namespace, link, sshd, server and process be gone."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from tests.integration.slurm import _kill_namespace, _pid_alive
from tests.integration.sshd import namespaces_work

ROOT = Path(__file__).resolve().parents[2]

INNER = '''
import json, os, signal, subprocess, threading, time
from pathlib import Path

import pytest

STATE = Path(os.environ["HYGIENE_STATE"])
NS = os.environ["HYGIENE_NS"]


@pytest.fixture
def blocked(lab, tmp_path):
    """The session's lab, plus a namespace of this test's own with a process (its own session) inside."""
    subprocess.run(["ip", "netns", "add", NS], check=True)
    child = subprocess.Popen(["ip", "netns", "exec", NS, "sleep", "600"], start_new_session=True)
    state = {
        "namespaces": [NS, *(h.namespace for h in lab.hosts.values())],
        "links": [f"sc{lab.tag}h{i}a" for i in range(len(lab.hosts))],
        "pids": [child.pid, *(h.process.pid for h in lab.hosts.values())],
    }
    try:
        yield state
    finally:
        os.killpg(child.pid, signal.SIGKILL)
        child.wait()
        subprocess.run(["ip", "netns", "del", NS], check=True)


def test_sleeps(blocked):
    STATE.write_text(json.dumps(blocked))
    time.sleep(600)


def test_deploys(blocked, tmp_path):
    from specctl.cli.app import main
    from tests.cli.test_signals import NAME, server_group, stuck_profile

    profile = stuck_profile(tmp_path, int(os.environ["HYGIENE_PORT"]))
    root = Path(os.environ["HOME"]) / ".specctl" / "hosts" / "local" / NAME

    def ready():
        group = server_group(root)
        STATE.write_text(json.dumps({**blocked, "server": group}))

    threading.Thread(target=ready, daemon=True).start()
    code = main(["deploy", str(profile), "--skip-check", "--no-verify", "--ledger", os.environ["HYGIENE_LEDGER"]])
    pytest.fail(f"the deploy returned {code}: the signal did not stop the run")
'''


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def namespaces() -> set[str]:
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True).stdout
    return {line.split()[0] for line in out.splitlines() if line.strip()}


def link_exists(name: str) -> bool:
    return subprocess.run(["ip", "link", "show", name], capture_output=True).returncode == 0


def wait_for(path: Path, child: subprocess.Popen[bytes], log: Path, timeout: float) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.read_text():
            return dict(json.loads(path.read_text()))
        if child.poll() is not None:
            pytest.fail(f"the inner run ended before its test blocked:\n{log.read_text()[-4000:]}")
        time.sleep(0.05)
    pytest.fail("the inner run's test did not start in time")


@pytest.mark.parametrize(
    ("test", "signum", "code"),
    [
        ("test_sleeps", signal.SIGTERM, 128 + signal.SIGTERM),
        ("test_sleeps", signal.SIGINT, pytest.ExitCode.INTERRUPTED),
        ("test_deploys", signal.SIGTERM, 128 + signal.SIGTERM),  # the CLI's own handler is installed then
    ],
    ids=["sigterm", "sigint", "sigterm-during-an-in-process-deploy"],
)
def test_a_stopped_run_leaves_nothing_behind(tmp_path: Path, test: str, signum: int, code: int) -> None:
    if not namespaces_work():
        why = "the hygiene test needs root and network namespaces (`ip netns add`)"
        if os.environ.get("CI") == "true":
            pytest.fail(why)
        pytest.skip(why)
    inner = tmp_path / "inner"
    inner.mkdir()
    (inner / "pytest.ini").write_text("[pytest]\n")
    (inner / "test_inner.py").write_text(INNER)
    state = tmp_path / "state.json"
    ledger = tmp_path / "ledger.db"
    env = {
        **os.environ,
        "HYGIENE_STATE": str(state),
        "HYGIENE_NS": f"schyg-{os.getpid()}-{test}-{signum}",
        "HYGIENE_PORT": str(free_port()),
        "HYGIENE_LEDGER": str(ledger),
        "HOME": str(tmp_path / "home"),
        "NO_COLOR": "1",
        "HF_HUB_OFFLINE": "1",
    }
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "tests._hygiene"]
    argv += ["-p", "tests.integration.conftest", "-q", "-s", "--basetemp", str(tmp_path / "basetemp")]
    argv += [f"{inner / 'test_inner.py'}::{test}"]
    log = tmp_path / "inner.log"
    with log.open("wb") as out:  # a file, not a pipe: what the run leaves behind may hold a pipe open
        child = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    seen: dict[str, Any] = {}
    try:
        seen = wait_for(state, child, log, timeout=120)
        child.send_signal(signum)  # once, to the pytest process only
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the run did not stop within 30 s of {signal.Signals(signum).name}")
        output = log.read_text()
        assert child.returncode == code, output[-4000:]
        assert not set(seen["namespaces"]) & namespaces(), output[-4000:]
        assert not [link for link in seen["links"] if link_exists(link)]
        deadline = time.monotonic() + 5  # a killed process outside pytest's own children is reaped by init
        while (alive := [p for p in seen["pids"] if _pid_alive(p)]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not alive, f"processes left running: {alive}"
        if "server" in seen:
            assert seen["server"] is not None, output[-4000:]
            assert not [p for p in Path("/proc").iterdir() if p.name.isdigit() and _in_group(p, seen["server"])]
            from tests.conftest import run_cli

            runs = run_cli("--json", "runs", "--ledger", str(ledger)).json()["runs"]
            assert [(r["kind"], r["status"]) for r in runs] == [("deploy", "killed")]
    finally:
        if child.poll() is None:  # the proof failed: leave nothing of its own behind either
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        for ns in set(seen.get("namespaces", ())) & namespaces():
            _kill_namespace(ns)


def _in_group(proc: Path, group: int) -> bool:
    try:
        return os.getpgid(int(proc.name)) == group and _pid_alive(int(proc.name))
    except OSError:
        return False
