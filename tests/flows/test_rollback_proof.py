"""A rollback proven and recorded as observed, in the fast tier (tests/fakes/: the engine double and
fake hosts, whose commands, like an SSH host's, do not inherit the operator's environment): the
secrets the stored release's own profile names are proven set before anything stops, and reach the
restarted server; a verify that reaches no server of it closes the run `unreachable` (exit 3, the
release's verification unchanged); a baseline whose server is gone during its measurement too; and the
run's copy in a release directory on a full disk is a note, written whole or not at all."""

from __future__ import annotations

import json
import os
import signal
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from specctl.hosts import local
from specctl.hosts.transport import Completed, OnOutput, Transport
from tests.fakes.inputs import fast_inputs, write_profile
from tests.ledger.conftest import fill, tiny_disk  # noqa: F401 - the tmpfs fixture, a full disk at the runs directory

NAME = "tiny-llama-demo"
SECRET = "SPECCTL_TEST_ROLLBACK_SECRET"
BUDGET = ("--startup-timeout", "20")


@pytest.fixture
def h1(tmp_path: Path, cli: Any, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """One fake host whose commands see SECRET only when specctl sends it (as over SSH)."""
    fake_hosts.add("h1")
    _, address = fake_hosts.hosts["h1"]

    def transport(name: str) -> Transport:
        def run(
            argv: Sequence[str],
            *,
            timeout_s: float,
            env: Mapping[str, str] | None,
            stdin: bytes | None,
            on_stdout: OnOutput | None = None,
        ) -> Completed:
            here = {**(env or {}), "SPECCTL_FAKE_HOST": name, "SPECCTL_FAKE_HOST_ADDRESS": address}
            scrub = [] if SECRET in here else ["env", "-u", SECRET]  # the operator's value stays with the operator
            return local._run([*scrub, *argv], timeout_s=timeout_s, env=here, stdin=stdin, on_stdout=on_stdout)

        return Transport(name, address, run)

    monkeypatch.setattr(fake_hosts, "transport", transport)
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory(groups={"all": ["h1"]})))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["all"])
    yield {"v1": str(v1), "root": fake_hosts.root("h1") / NAME, "engine": fake_engine}
    cli("stop", str(v1))


def _deploy(cli: Any, profile: str | Path, *more: str) -> str:
    done = cli("--json", "deploy", *BUDGET, str(profile), *more)
    assert done.code == 0, done.stdout + done.stderr
    return str(done.json()["hosts"][0]["release"])


def _pid(h1: dict[str, Any], release: str) -> int:
    pid = int((h1["root"] / "releases" / release / "server.pid").read_text())
    os.kill(pid, 0)  # alive
    return pid


def _current(h1: dict[str, Any]) -> str:
    return os.readlink(h1["root"] / "current").rsplit("/", 1)[-1]


def _environ(pid: int) -> dict[str, str]:
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(item.decode().split("=", 1) for item in raw if b"=" in item)


def _last_run(cli: Any, kind: str) -> dict[str, Any]:
    run = cli("--json", "runs", "--kind", kind).json()["runs"][-1]
    return dict(cli("--json", "show", run["id"]).json())


def _secret_release(cli: Any, h1: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> tuple[str, str]:
    """A release whose profile names SECRET (then replaced by v1, which names none): (it, the serving one)."""
    v3 = write_profile(Path(h1["v1"]).parent / "v3.yaml", h1["v1"], 3, secrets=[SECRET])
    monkeypatch.setenv(SECRET, "s3cret-value")
    with_secret = _deploy(cli, v3, "--no-verify")
    assert _environ(_pid(h1, with_secret)).get(SECRET) == "s3cret-value"  # what the deploy gave it
    serving = _deploy(cli, h1["v1"], "--no-verify")
    assert SECRET not in _environ(_pid(h1, serving))  # v1 names no secret: none crosses to the host
    return with_secret, serving


def test_a_rollback_to_a_release_whose_secret_is_unset_is_refused_before_the_stop(
    cli: Any, h1: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the rollback stopped the serving release and started the old one without its secret."""
    with_secret, serving = _secret_release(cli, h1, monkeypatch)
    pid = _pid(h1, serving)
    monkeypatch.delenv(SECRET)
    result = cli("--json", "rollback", h1["v1"], "--to", with_secret)
    assert result.code == 3, result.stdout + result.stderr
    error = result.json()["error"]
    assert SECRET in error["message"] and "not set" in error["message"] and "nothing was stopped" in error["fix"]
    assert _pid(h1, serving) == pid and _current(h1) == serving
    events = {(e["step"], e["event"]) for e in _last_run(cli, "rollback")["events"]}
    assert ("prove", "failed") in events and not any(step == "stop-previous" for step, _ in events), events


def test_a_rollback_starts_the_stored_release_with_the_secrets_its_profile_names(
    cli: Any, h1: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: `rollback` passed no secrets, so the restarted server had none of them."""
    with_secret, _ = _secret_release(cli, h1, monkeypatch)
    monkeypatch.setenv(SECRET, "the-value-now")
    result = cli("--json", "rollback", h1["v1"], "--to", with_secret)
    assert result.code == 0, result.stdout + result.stderr
    assert _current(h1) == with_secret
    assert _environ(_pid(h1, with_secret)).get(SECRET) == "the-value-now"


def test_a_failed_deploy_restores_what_ran_with_the_secrets_its_own_profile_names(
    cli: Any, h1: dict[str, Any], fake_engine: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The undo of a failed start puts back what ran with that release's secrets, not only the new
    release's (before: a v4 naming none restored the release naming SECRET without it)."""
    with_secret, _ = _secret_release(cli, h1, monkeypatch)
    assert cli("rollback", h1["v1"], "--to", with_secret).code == 0
    v4 = write_profile(Path(h1["v1"]).parent / "v4.yaml", h1["v1"], 4)
    fake_engine.on(version=4, start="crash")
    failed = cli("--json", "deploy", str(v4), "--skip-check", "--startup-timeout", "20")
    assert failed.code == 3, failed.stdout + failed.stderr
    assert _current(h1) == with_secret
    assert _environ(_pid(h1, with_secret)).get(SECRET) == "s3cret-value"


def test_a_rollback_whose_verify_reaches_no_server_is_unreachable_not_failed(
    cli: Any, h1: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the run closed `failed` (exit 3 from the error, but a verdict-like status in the ledger)."""
    from specctl.flows import rollback

    verified = _deploy(cli, h1["v1"])  # verified: its record says so, and must still say so after
    _deploy(cli, h1["v1"], "--no-verify")
    record = h1["root"] / "releases" / verified / "record.json"
    before = json.loads(record.read_text())["verification"]
    assert before["state"] == "verified"
    verify_and_record = rollback.verify_and_record

    def killed_first(rec: Any, session: Any, run_id: str, **kwargs: Any) -> Any:
        os.killpg(_pid(h1, run_id), signal.SIGKILL)  # the restarted server dies between `ready` and verify
        return verify_and_record(rec, session, run_id, **kwargs)

    monkeypatch.setattr(rollback, "verify_and_record", killed_first)
    result = cli("--json", "rollback", h1["v1"], "--to", verified)
    assert result.code == 3, result.stdout + result.stderr
    error = result.json()["error"]
    assert "reached no server" in error["message"] and "its record is unchanged" in error["message"], error
    assert json.loads(record.read_text())["verification"] == before
    run = _last_run(cli, "rollback")
    assert run["status"] == "unreachable" and run["verdict"]["passed"] is None, run
    copy = h1["root"] / "releases" / verified / "runs" / f"{run['id']}.json"
    assert json.loads(copy.read_text())["status"] == "unreachable"
    assert not (h1["root"] / "lock").exists()


def test_a_baseline_whose_server_is_gone_during_its_measurement_is_unreachable(
    cli: Any, h1: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Before: the run closed `failed`, as if something had been judged."""
    from specctl.flows import baseline

    serving = _deploy(cli, h1["v1"], "--no-verify")
    warm_up = baseline.warm_up

    def killed_first(client: Any, *args: Any, **kwargs: Any) -> Any:
        [server] = [s for s in h1["engine"].live() if s.baseline]
        os.killpg(os.getpgid(server.pid), signal.SIGKILL)
        return warm_up(client, *args, **kwargs)

    monkeypatch.setattr(baseline, "warm_up", killed_first)
    result = cli("--json", "baseline", h1["v1"])
    assert result.code == 3, result.stdout + result.stderr
    error = result.json()["error"]
    assert "stopped answering during the measurement" in error["message"], error
    assert "the host was given back" in error["message"], error
    run = _last_run(cli, "baseline")
    assert run["status"] == "unreachable" and run["verdict"]["passed"] is None, run
    assert _current(h1) == serving and _pid(h1, serving)  # the profile's server runs again


def test_the_runs_copy_on_a_full_disk_is_a_note_and_nothing_half_written(
    cli: Any,
    h1: dict[str, Any],
    tiny_disk: Path,  # noqa: F811 - the fixture imported above
) -> None:
    """Before: said as a passing line of progress (not a note), without saying the run stands."""
    serving = _deploy(cli, h1["v1"], "--no-verify")
    runs = h1["root"] / "releases" / serving / "runs"
    runs.mkdir(exist_ok=True)
    _mount_full(tiny_disk, runs)
    try:
        result = cli("--json", "verify", h1["v1"], "--baseline", "skip")
        assert result.code == 0, result.stdout + result.stderr
        run = _last_run(cli, "verify")
        notes = [json.loads(line) for line in result.stderr.splitlines() if line.startswith("{")]
        said = " ".join(n["text"] for n in notes if n.get("event") == "note")
        assert f"run {run['id']} happened and the ledger has it" in said, result.stderr
        assert f"no space left on h1 at {runs}/{run['id']}.json (0.0 MB free)" in said, said
        assert "lock" not in said  # released in the same round trip, and seen gone
        assert sorted(p.name for p in runs.iterdir()) == ["filler"]  # no empty copy, no temporary file
        assert run["status"] == "succeeded"
        assert not (h1["root"] / "lock").exists()
    finally:
        _unmount(runs)


def test_a_copy_kept_without_the_lock_is_written_whole_or_said(tmp_path: Path, tiny_disk: Path) -> None:  # noqa: F811
    """`keep` outside a hold (tune giving a candidate's copy): before, `transport.put` said only
    "exit 1", not the full disk."""
    from specctl.flows.recorder import recording
    from specctl.flows.session import Context
    from specctl.hosts.inventory import HostSpec
    from specctl.ledger.ledger import Ledger

    notes: list[str] = []
    ctx = Context(Ledger(tmp_path / "ledger.db"), "specctl test", on_note=lambda host, text: notes.append(text))
    session = ctx.session(HostSpec("local", str(tmp_path / "root"), None, None, {}), NAME)
    runs = Path(session.release("r1").path("runs"))
    runs.mkdir(parents=True)
    _mount_full(tiny_disk, runs)
    try:
        with recording(ctx, "tune", hosts=["local"]) as rec:
            rec.outcome.status = "succeeded"
        rec.keep(session, "r1")
        assert sorted(p.name for p in runs.iterdir()) == ["filler"]
        [note] = notes
        assert f"run {rec.run_id} happened and the ledger has it" in note
        assert f"no space left on local at {runs}/{rec.run_id}.json (0.0 MB free)" in note
        assert "lock" not in note
    finally:
        _unmount(runs)
    rec.keep(session, "r1")  # room again: the copy is there, whole
    assert json.loads((runs / f"{rec.run_id}.json").read_text())["status"] == "succeeded"
    ctx.ledger.close()


def _mount_full(disk: Path, at: Path) -> None:
    """The tmpfs, filled, bound over `at`: that directory alone has no room."""
    import subprocess

    fill(disk)
    subprocess.run(["mount", "--bind", str(disk), str(at)], check=True, capture_output=True)


def _unmount(at: Path) -> None:
    import subprocess

    if subprocess.run(["umount", str(at)], capture_output=True).returncode != 0:
        subprocess.run(["umount", "-l", str(at)], check=True)


def test_a_rollback_from_a_current_whose_server_died_says_what_ran(cli: Any, h1: dict[str, Any]) -> None:
    """`current` names a release whose server is dead: the rollback replaced nothing that ran, and its
    result says so from what preflight saw, not "rolled back from" the dead release."""
    verified = _deploy(cli, h1["v1"])
    dead = _deploy(cli, h1["v1"], "--no-verify")
    os.killpg(_pid(h1, dead), signal.SIGKILL)
    back = cli("--json", "rollback", h1["v1"])
    assert back.code == 0, back.stdout + back.stderr
    [row] = back.json()["hosts"]
    assert row["detail"].startswith(f"rolled back to {verified} (current named {dead}, whose server was not running")
    assert _current(h1) == verified
