"""A signal during a deploy: the deploy unwinds (its new server stopped, the lock released, the run
closed as killed) and then, for the CLI run inside another Python program (the tests' `run_cli`), the
signal is passed on to that program, so one Ctrl-C stops it too; the real CLI process exits 130."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import yaml

from specctl.cancel import on_signals, passed_on
from specctl.flows.demo import write_inputs
from tests.conftest import ROOT, run_cli

NAME = "tiny-llama-demo"


def stuck_profile(tmp_path: Path, port: int) -> Path:
    """The demo's v1 profile on the local host, its engine's interpreter one whose server never becomes ready."""
    v1, _ = write_inputs(tmp_path / "work", port)
    data = yaml.safe_load(v1.read_text())
    hang = tmp_path / "hang.sh"
    hang.write_text(
        f'#!/bin/sh\n[ "$2" = specctl.engines.reference ] && exec sleep 600\nexec {data["engine"]["python"]} "$@"\n'
    )
    hang.chmod(0o755)
    data["engine"]["python"] = str(hang)
    v1.write_text(yaml.safe_dump(data, sort_keys=False))
    return v1


def server_group(root: Path, timeout: float = 60) -> int | None:
    """The process group of the profile's new server, once its launch wrote it (None: not in time)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for pidfile in root.glob("releases/*/server.pid"):
            text = pidfile.read_text().strip()
            if text.isdigit():
                return int(text)
        time.sleep(0.05)
    return None


def group_alive(group: int) -> bool:
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def assert_unwound(root: Path, group: int, ledger: Path) -> None:
    deadline = time.monotonic() + 10
    while group_alive(group) and time.monotonic() < deadline:  # SIGTERM to the group; it may take a moment
        time.sleep(0.05)
    assert not group_alive(group), "the stuck server was left running"
    assert not (root / "lock").exists() and not (root / "current").exists()
    runs = run_cli("--json", "runs", "--ledger", str(ledger)).json()["runs"]
    assert [(r["kind"], r["status"]) for r in runs] == [("deploy", "killed")]


def test_one_sigint_unwinds_an_in_process_deploy_then_stops_its_caller(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the local host's state root is ~/.specctl/hosts/local
    # the caller is a program with Python's own SIGINT handler; a suite started in the background by a
    # shell inherits SIGINT ignored, and an ignored signal rightly stays ignored (passed_on)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        profile, ledger, root = (
            stuck_profile(tmp_path, 31861),
            tmp_path / "ledger.db",
            tmp_path / "home" / ".specctl" / "hosts" / "local" / NAME,
        )
        seen: list[int] = []

        def interrupt_once_it_waits() -> None:
            group = server_group(root)
            if group is not None:  # not in time: the deploy returns by itself and the test fails below
                seen.append(group)
                os.kill(os.getpid(), signal.SIGINT)  # as a Ctrl-C would: to this process, the main thread's handler

        timer = threading.Thread(target=interrupt_once_it_waits, daemon=True)
        timer.start()
        with pytest.raises(KeyboardInterrupt):
            result = run_cli("deploy", str(profile), "--skip-check", "--no-verify", "--ledger", str(ledger))
            pytest.fail(f"the deploy returned {result.code} instead of passing the SIGINT on: {result.stderr}")
        timer.join(5)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # the caller's handlers are back
        assert_unwound(root, seen[0], ledger)
    finally:
        signal.signal(signal.SIGINT, previous)


def test_the_cli_process_unwinds_and_exits_130_at_sigint(tmp_path: Path) -> None:
    profile, ledger, home = stuck_profile(tmp_path, 31862), tmp_path / "ledger.db", tmp_path / "home"
    root = home / ".specctl" / "hosts" / "local" / NAME
    child = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "specctl",
            "deploy",
            str(profile),
            "--skip-check",
            "--no-verify",
            "--ledger",
            str(ledger),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env={**os.environ, "HOME": str(home), "NO_COLOR": "1", "PYTHONFAULTHANDLER": "1"},
    )
    try:
        group = server_group(root)
        assert group is not None, "the deploy never started its server"
        child.send_signal(signal.SIGINT)
        try:
            _, err = child.communicate(timeout=60)
        except subprocess.TimeoutExpired:  # where it waits: faulthandler prints every thread's stack at SIGABRT
            child.send_signal(signal.SIGABRT)
            pytest.fail(f"the deploy did not unwind within 60 s of SIGINT:\n{child.communicate(timeout=30)[1]}")
    finally:
        if child.poll() is None:
            child.kill()
            child.communicate()
    assert child.returncode == 130, err
    assert "stopped by SIGINT" in err and "Traceback" not in err, err
    assert_unwound(root, group, ledger)


def test_a_signal_is_passed_on_once_to_the_callers_own_handler() -> None:
    received: list[int] = []

    def callers(signum: int, frame: Any) -> None:
        received.append(signum)

    previous = signal.signal(signal.SIGTERM, callers)
    try:
        with passed_on():
            with on_signals() as token:
                os.kill(os.getpid(), signal.SIGTERM)
                assert token.cancelled and not received  # the command's: it unwinds first
        assert received == [signal.SIGTERM] and signal.getsignal(signal.SIGTERM) is callers
        with passed_on():
            with pytest.raises(KeyboardInterrupt):  # outside on_signals: it interrupts the command
                os.kill(os.getpid(), signal.SIGTERM)
                time.sleep(5)
        assert received == [signal.SIGTERM] * 2
        with passed_on():
            pass
        assert received == [signal.SIGTERM] * 2  # nothing caught, nothing passed on
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_an_ignored_signal_stays_ignored() -> None:
    previous = signal.signal(signal.SIGTERM, signal.SIG_IGN)
    try:
        with passed_on():
            with on_signals() as token:
                os.kill(os.getpid(), signal.SIGTERM)
        assert token.cancelled and signal.getsignal(signal.SIGTERM) is signal.SIG_IGN
    finally:
        signal.signal(signal.SIGTERM, previous)
