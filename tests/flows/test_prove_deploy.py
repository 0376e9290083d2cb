"""The deploy's prove step through the CLI, in the fast tier (fake hosts: local transports, each with
its own loopback address; the engine double): only the paths the engine reads are asked, a port
that would not bind says why, and a port taken after preflight is found before anything stops."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from specctl.flows import change
from tests.fakes.inputs import fast_inputs, write_profile

NAME = "tiny-llama-demo"
BUDGET = ("--startup-timeout", "20")


@pytest.fixture
def one(tmp_path: Path, cli: Any, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    fake_hosts.add("h1")
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory(groups={"all": ["h1"]})))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["all"])
    yield v1
    cli("stop", str(v1))


def test_a_flag_naming_a_path_the_engine_does_not_read_is_not_refused(cli: Any, one: Path) -> None:
    """Before: every absolute word of the launch had to exist: `--served-model-name /models/x` refused it."""
    v2 = write_profile(one.parent / "v2.yaml", one.name, 2, engine={"args": {"served-model-name": "/models/x"}})
    done = cli("deploy", *BUDGET, str(v2), "--no-verify")
    assert done.code == 0, done.stdout + done.stderr


def test_an_engine_host_not_of_this_host_is_said_so(cli: Any, one: Path, fake_engine: Any) -> None:
    """Before: any bind error read "port N is in use ... by something other than" the profile's servers."""
    v2 = write_profile(one.parent / "v2.yaml", one.name, 2, engine={"host": "203.0.113.7"})
    done = cli("deploy", *BUDGET, str(v2), "--no-verify")
    said = " ".join((done.stdout + done.stderr).split())
    assert done.code == 3 and "engine.host 203.0.113.7 is not an address of this host" in said, said
    assert "in use" not in said and not fake_engine.servers


def test_a_port_taken_after_preflight_is_found_before_anything_stops(
    cli: Any, one: Path, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A port a stranger takes while the release is staged and written is found by the prove: v1
    keeps serving. Before: found only by the start, after v1 was stopped."""
    first = cli("deploy", *BUDGET, str(one), "--no-verify")
    assert first.code == 0, first.stdout + first.stderr
    port = _free_port()
    v2 = write_profile(one.parent / "v2.yaml", one.name, 2, engine={"port": port})
    stranger = socket.socket()
    written = change.materialise

    def materialise_then_take_the_port(c: change.Change) -> None:
        written(c)
        stranger.bind((fake_hosts.hosts["h1"][1], port))
        stranger.listen(1)

    monkeypatch.setattr(change, "materialise", materialise_then_take_the_port)
    try:
        done = cli("deploy", *BUDGET, str(v2), "--no-verify")
    finally:
        stranger.close()
    said = " ".join((done.stdout + done.stderr).split())
    assert done.code == 3 and f"port: port {port} is in use on 0.0.0.0" in said, said
    assert [s.alive for s in fake_engine.servers] == [True], said  # v1 was never stopped


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_the_dry_run_proves_by_the_deploys_own_driver(cli: Any, one: Path, fake_engine: Any, fake_hosts: Any) -> None:
    """`deploy --dry-run` asks what the deploy's preflight and prove ask (flows/prove.py `prove_host`).
    Before: its own copy refused a path the engine does not read, never judged the host's facts
    against the profile, and never tried the port."""
    output = write_profile(one.parent / "v2.yaml", one.name, 2, engine={"args": {"served-model-name": "/models/x"}})
    shown = cli("deploy", str(output), "--dry-run")
    assert shown.code == 0 and "prove ok on h1" in shown.stdout, shown.stdout + shown.stderr

    gpus = write_profile(one.parent / "v3.yaml", one.name, 3, hardware={"gpu": "h100", "gpus_per_node": 1})
    shown = cli("deploy", str(gpus), "--dry-run", "--skip-check")
    said = " ".join(shown.stdout.split())
    assert shown.code == 3 and "host-gpu-count: h1 has 0 GPU(s); the profile needs 1" in said, said

    port = _free_port()
    on_port = write_profile(one.parent / "v4.yaml", one.name, 4, engine={"port": port})
    with socket.socket() as stranger:
        stranger.bind((fake_hosts.hosts["h1"][1], port))
        stranger.listen(1)
        shown = cli("deploy", str(on_port), "--dry-run")
    said = " ".join(shown.stdout.split())
    assert shown.code == 3 and f"port: port {port} is in use on 0.0.0.0" in said, said
    serving = cli("deploy", *BUDGET, str(on_port), "--no-verify")
    assert serving.code == 0, serving.stdout + serving.stderr
    again = cli("deploy", str(on_port), "--dry-run")  # current's server holds the port: its stop frees it
    assert again.code == 0 and "prove ok on h1" in again.stdout, again.stdout + again.stderr
