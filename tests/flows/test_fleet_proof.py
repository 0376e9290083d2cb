"""Proof before action across a fleet, in the fast tier (fake hosts with their own roots and addresses,
the engine double): one host whose release cannot start costs the other hosts nothing (every host
waits after `prove`, flows/change.py's `ProofGate`, before anything stops); a new server that hangs
after readiness is stopped when what ran cannot be put back; a time limit that cannot be read after
the switch is a note, not a failed host."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from specctl.errors import ConnectionLost
from specctl.release.platform import ProcessPlatform
from specctl.release.release import Release
from tests.fakes.inputs import fast_inputs, write_profile

NAME = "tiny-llama-demo"
HOSTS = ("h0", "h1")
BUDGET = ("--startup-timeout", "20")


@pytest.fixture
def pair(tmp_path: Path, cli: Any, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Any:
    """Two hosts, each serving v1, verified."""
    fake_hosts.add(*HOSTS)
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory(groups={"all": list(HOSTS)})))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["all"])
    first = cli("--json", "deploy", *BUDGET, str(v1))
    assert first.code == 0, first.stdout + first.stderr
    good = {h["host"]: h["release"] for h in first.json()["hosts"]}
    assert all(h["verdict"]["passed"] for h in first.json()["hosts"])
    yield {"v1": str(v1), "profiles": v1.parent, "good": good}
    cli("stop", str(v1))


def current(fake_hosts: Any, host: str) -> str:
    return (fake_hosts.root(host) / NAME / "current").resolve().name


def server_pid(fake_hosts: Any, host: str, run_id: str) -> int:
    return int((fake_hosts.root(host) / NAME / "releases" / run_id / "server.pid").read_text())


def alive(pid: int) -> bool:
    """The process lives (a zombie that init has not reaped yet is gone)."""
    try:
        os.kill(pid, 0)
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0] != "Z"
    except (ProcessLookupError, FileNotFoundError):
        return False


def steps_of_last_deploy(cli: Any) -> set[tuple[str, str, str]]:
    run = cli("--json", "runs", "--kind", "deploy").json()["runs"][-1]["id"]
    return {(e["host"], e["step"], e["event"]) for e in cli("--json", "show", run).json()["events"]}


def older_engine_on_h1(tmp_path: Path, fake_engine: Any) -> str:
    """An interpreter whose engine, on h1 only, is older: its launch parser does not know --context-length
    (refused as argparse refuses an unknown flag); everywhere else it is the engine double's."""
    python = tmp_path / "engine-python-h1-older"
    python.write_text(
        "#!/bin/sh\n"
        'if [ "${SPECCTL_FAKE_HOST:-}" = h1 ]; then\n'
        '  for w do [ "$w" = --context-length ] && { echo "error: unrecognized arguments: $w" >&2; exit 2; }; done\n'
        "fi\n"
        f'exec {fake_engine.python} "$@"\n'
    )
    python.chmod(0o755)
    return str(python)


def test_a_host_failing_prove_stops_nothing_anywhere_unless_max_failures_allows_it(
    cli: Any, pair: dict[str, Any], fake_hosts: Any, fake_engine: Any, tmp_path: Path
) -> None:
    good = pair["good"]
    pids = {h: server_pid(fake_hosts, h, good[h]) for h in HOSTS}
    v3 = write_profile(
        pair["profiles"] / "tiny-llama-v3.yaml",
        "tiny-llama-v1.yaml",
        3,
        engine={"python": older_engine_on_h1(tmp_path, fake_engine), "args": {"context-length": 256}},
    )
    refused = cli("--json", "deploy", *BUDGET, str(v3), "--skip-check")
    assert refused.code == 3, refused.stdout + refused.stderr
    rows = {h["host"]: h for h in refused.json()["hosts"]}
    assert "not proven" in rows["h1"]["detail"] and "--context-length" in rows["h1"]["detail"], rows["h1"]
    assert not rows["h0"]["ok"] and "nothing was stopped" in rows["h0"]["detail"], rows["h0"]
    events = steps_of_last_deploy(cli)
    assert not any(step == "stop-previous" for _, step, _ in events), sorted(events)
    for h in HOSTS:  # the same servers, never stopped, still current
        assert alive(pids[h]) and server_pid(fake_hosts, h, good[h]) == pids[h] and current(fake_hosts, h) == good[h]
    assert sorted(s.release for s in fake_engine.live()) == sorted(good.values())

    allowed = cli("--json", "deploy", *BUDGET, str(v3), "--skip-check", "--max-failures", "1")
    assert allowed.code == 3, allowed.stdout + allowed.stderr
    rows = {h["host"]: h for h in allowed.json()["hosts"]}
    assert rows["h0"]["ok"] and rows["h0"]["verdict"]["passed"] and not rows["h1"]["ok"], allowed.stdout
    assert current(fake_hosts, "h0") == rows["h0"]["release"] != good["h0"] and not alive(pids["h0"])
    assert current(fake_hosts, "h1") == good["h1"] and alive(pids["h1"])
    events = steps_of_last_deploy(cli)
    assert ("h0", "stop-previous", "ended") in events and not any(
        h == "h1" and s == "stop-previous" for h, s, _ in events
    )


def test_a_hung_new_server_is_stopped_when_what_ran_cannot_be_restored(
    cli: Any, pair: dict[str, Any], fake_hosts: Any, fake_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Ready, then no answer to verify (its process still running); the restore of what ran is refused
    before its stop (the engine changed since that release was made): the new server is stopped, the
    result says nothing serves, and status agrees."""
    import specctl.flows.deploy as deploy_flow
    from specctl.errors import ServerUnreachable

    good = pair["good"]["h0"]
    facts = fake_hosts.root("h0") / NAME / "releases" / good / "host-facts.json"
    data = json.loads(facts.read_text())
    data["engine_version"] = "0.0.1-before-the-upgrade"
    facts.write_text(json.dumps(data))

    def hung(rec: Any, session: Any, run_id: str, **options: Any) -> Any:
        raise ServerUnreachable(
            f"{session.name}: {run_id} is still running but does not answer", host=session.name, release=run_id
        )

    monkeypatch.setattr(deploy_flow, "verify_and_record", hung)
    v3 = write_profile(pair["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3)
    done = cli("--json", "deploy", *BUDGET, str(v3), "--skip-check", "--hosts", "h0")
    assert done.code == 3, done.stdout + done.stderr
    [h0] = done.json()["hosts"]
    new = h0["release"] or cli("--json", "runs", "--kind", "deploy").json()["runs"][-1]["id"]
    assert "a failed start" in h0["detail"] and "0.0.1-before-the-upgrade" in h0["detail"], h0["detail"]
    assert "nothing serves" in h0["detail"] and not h0["rolled_back_to"], h0["detail"]
    assert not alive(server_pid(fake_hosts, "h0", new))
    record = json.loads((fake_hosts.root("h0") / NAME / "releases" / new / "record.json").read_text())
    assert record["life"] == "failed-start"
    [state] = cli("--json", "status", pair["v1"], "--hosts", "h0").json()["hosts"]
    assert not state["running"] and not state["healthy"] and state["servers"] == [], state


def test_a_time_limit_that_cannot_be_read_after_the_switch_is_a_note(
    cli: Any, pair: dict[str, Any], fake_hosts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`current` has moved: the connection lost while the platform reads the server's time limit fails
    neither the host nor its verify."""

    def lost(self: ProcessPlatform, release: Release) -> str | None:
        raise ConnectionLost("h0: connection lost (reading the time limit)", host="h0")

    monkeypatch.setattr(ProcessPlatform, "time_limit", lost)
    v3 = write_profile(pair["profiles"] / "tiny-llama-v3.yaml", "tiny-llama-v1.yaml", 3)
    done = cli("--json", "deploy", *BUDGET, str(v3), "--skip-check", "--hosts", "h0")
    assert done.code == 0, done.stdout + done.stderr
    [h0] = done.json()["hosts"]
    assert h0["ok"] and h0["verdict"]["passed"] and current(fake_hosts, "h0") == h0["release"]
    assert "could not be read: h0: connection lost" in done.stderr, done.stderr


def test_a_multi_node_rollback_whose_rank_fails_prove_stops_no_rank(
    cli: Any, tmp_path: Path, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Node rank 1's engine is downgraded after two releases of a two-node profile: a rollback to the
    first is refused at rank 1's prove, and rank 0 never stops the second (every rank waits)."""
    import yaml

    fake_hosts.add(*HOSTS)
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory(groups={"all": list(HOSTS)})))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["h0", "h1"])
    downgraded = tmp_path / "h1-downgraded"
    python = tmp_path / "engine-python"
    python.write_text(
        "#!/bin/sh\n"
        f'if [ "${{SPECCTL_FAKE_HOST:-}}" = h1 ] && [ -e {downgraded} ]; then\n'
        '  for w do [ "$w" = --context-length ] && { echo "error: unrecognized arguments: $w" >&2; exit 2; }; done\n'
        "fi\n"
        f'exec {fake_engine.python} "$@"\n'
    )
    python.chmod(0o755)
    data = yaml.safe_load(v1.read_text())
    data["metadata"] = {"name": "tiny-llama-2node", "version": 1}
    data["parallel"] = {"tp": 1, "nnodes": 2, "dist_init_port": 29556}
    data["hardware"]["gpus_per_node"] = 1
    data["engine"] = {**data["engine"], "python": str(python), "args": {"context-length": 256}}
    multi = v1.parent / "tiny-llama-2node.yaml"
    multi.write_text(yaml.safe_dump(data, sort_keys=False))
    try:
        first, second = (cli("--json", "deploy", *BUDGET, str(multi), "--skip-check", "--no-verify") for _ in (1, 2))
        assert first.code == second.code == 0, first.stdout + second.stdout
        old, new = first.json()["hosts"][0]["release"], second.json()["hosts"][0]["release"]
        base = {h: fake_hosts.root(h) / "tiny-llama-2node" for h in HOSTS}
        pids = {h: int((base[h] / "releases" / new / "server.pid").read_text()) for h in HOSTS}
        downgraded.touch()
        back = cli("--json", "rollback", str(multi), "--to", old)
        assert back.code == 3, back.stdout + back.stderr  # a host failed (at prove): exit 3, not a failed verify
        rows = {h["host"]: h for h in back.json()["hosts"]}
        assert "not proven" in rows["h1"]["detail"] and "--context-length" in rows["h1"]["detail"], rows
        assert "nothing was stopped" in rows["h0"]["detail"], rows
        for h in HOSTS:
            assert (base[h] / "current").resolve().name == new and alive(pids[h]), h
            assert int((base[h] / "releases" / new / "server.pid").read_text()) == pids[h]
        run = cli("--json", "runs", "--kind", "rollback").json()["runs"][-1]["id"]
        events = {(e["host"], e["step"], e["event"]) for e in cli("--json", "show", run).json()["events"]}
        assert not any(step == "stop-previous" for _, step, _ in events), sorted(events)
    finally:
        cli("stop", str(multi))
