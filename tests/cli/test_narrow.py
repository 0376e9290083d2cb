"""80 columns (issue 26): what `deploy --dry-run`, `tune`/`show` of a tune run, `hosts` and `render`
print fits a terminal of 80 columns with nothing cut short, a host key's fingerprint is printed
whole, and `-o wide` shows the columns the narrow form leaves out."""

from __future__ import annotations

import io
import re
import shlex
from pathlib import Path
from typing import Any

import paramiko
import pytest

from specctl.cli._output import Output
from specctl.errors import HostError
from specctl.hosts._host_keys import KnownHostsPolicy, fingerprint
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Transport
from specctl.ledger.ledger import Ledger
from specctl.plan.candidates import heat_map
from tests.fakes.inputs import fast_inputs

ROOT = Path(__file__).resolve().parents[2]
KEY = paramiko.RSAKey.generate(1024)  # any key: what is shown is its fingerprint


@pytest.fixture(autouse=True)
def _eighty_columns(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")


def fits(text: str, width: int = 80) -> bool:
    """Every line within `width`, and nothing ellipsised (rich's `…` marks a cell cut short)."""
    return all(len(line) <= width for line in text.splitlines()) and "…" not in text


def whole(word: str, text: str) -> bool:
    """`word` on one line of `text`: never folded over two."""
    return any(word in line for line in text.splitlines())


# --- deploy --dry-run ----------------------------------------------------------------------------------


@pytest.fixture
def two_hosts(tmp_path: Path, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    fake_hosts.add("h0", "h1")
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory()))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["h0", "h1"])
    return v1


def test_deploy_dry_run_fits_80_columns_and_wide_has_every_column(cli: Any, two_hosts: Path) -> None:
    profile = str(two_hosts)
    try:
        assert cli("deploy", profile, "--hosts", "h0", "--no-verify", "--startup-timeout", "20").code == 0
        data = cli("--json", "deploy", profile, "--dry-run").json()["dry_run"]
        narrow = cli("deploy", profile, "--dry-run")
        wide = cli("deploy", profile, "--dry-run", "-o", "wide")
    finally:
        cli("stop", profile)
    assert narrow.code == 0 and fits(narrow.stdout), narrow.stdout
    current = data[0]["current"]  # `<release id> (v1)`: whole, on h0's row
    assert current.endswith("(v1)") and any(line.startswith(f"h0    {current}") for line in narrow.stdout.splitlines())
    lines = narrow.stdout.splitlines()
    # one launch command for both hosts, broken before each option, the same words when joined; a word
    # wider than the terminal (the test's interpreter path, under pytest's tmp_path) is folded, not cut
    [at] = [i for i, line in enumerate(lines) if line == "launch on h0, h1:"]
    command = "\n".join(lines[at + 1 :])
    assert command.startswith("  /") and "\\\n    --model-path " in command
    unfolded = re.sub(r"(?<!\\)\n", "", command).replace(" \\\n", " ")
    assert shlex.split(unfolded) == shlex.split(data[0]["launch"])
    assert "drafter overlay" not in lines[1] and "launch" not in lines[1]
    assert wide.code == 0 and "drafter overlay" in wide.stdout and "launch" in wide.stdout.splitlines()[2]
    assert sum(data[0]["launch"] in line for line in wide.stdout.splitlines()) == 2  # one line a host


# --- tune, and show of a tune run -----------------------------------------------------------------------


def _candidate(steps: int, topk: int, draft: int, estimate: float | None, **how: Any) -> dict[str, Any]:
    measured = estimate is not None and not how.get("failed")
    return {
        "key": f"steps={steps} topk={topk} draft={draft}",
        "incumbent": how.get("incumbent", False),
        "speculative": {"num_steps": steps, "eagle_topk": topk, "num_draft_tokens": draft, "adaptive": None},
        "release": f"20261201T1203{steps}{topk}Z-a1b2c3",
        "estimate": estimate,
        "interval": {"low": estimate * 0.93, "high": estimate * 1.06, "estimate": estimate} if measured else None,
        "requests": 48,
        "eliminated": how.get("eliminated", False),
        "failed": how.get("failed"),
        "winner": how.get("winner", False),
        "points": {"1": {"output_tokens_per_s": {"estimate": estimate * 0.3}}} if measured else {},
    }


TUNE_FAILURE = "no generation within the 600 s start-up budget (the server log names the last phase reached)"


def tune_data() -> dict[str, Any]:
    """What `tune --json` prints (flows/tune.py TuneResult.to_dict), for four candidates."""
    rows = [
        _candidate(3, 1, 4, 412.51, incumbent=True),
        _candidate(5, 1, 6, 455.2, winner=True),
        _candidate(3, 4, 8, 398.1, eliminated=True),
        _candidate(7, 4, 16, None, failed=TUNE_FAILURE),
    ]
    return {
        "run": "20261201T120000Z-9f8e7d",
        "host": "gpu-node-07",
        "profile": "llama-3.1-8b-b200",
        "version": 3,
        "objective": {"metric": "output_tokens_per_s", "concurrency": 8},
        "planned_requests": 64,
        "batch": 8,
        "level": 0.0125,
        "level_note": "every interval at 0.9875 (Bonferroni over 4 candidates)",
        "requests": 192,
        "exhaustive_requests": 256,
        "other_point_requests": 64,
        "candidates": rows,
        "dropped": [{"key": "steps=7 topk=1 draft=4", "reason": "num_draft_tokens 4 is below num_steps + 1"}],
        "winner": rows[1],
        "profile_file": "/home/someone/profiles/llama-3.1-8b-b200-v4.yaml",
        "restored": "20261130T101010Z-c0ffee",
        "heat_map": heat_map(rows),
        "applied": None,
    }


def _shown(wide: bool) -> str:
    from specctl.cli.tune_cmds import tune_view

    out = io.StringIO()
    Output(stdout=out, environ={"NO_COLOR": "1", "COLUMNS": "80"}).result(
        {}, tune_view(tune_data(), wide=wide), fit=not wide
    )
    return out.getvalue()


def test_the_tune_table_fits_80_columns_and_wide_adds_releases_and_other_points() -> None:
    narrow = _shown(wide=False)
    assert fits(narrow), narrow
    for row in tune_data()["candidates"]:
        assert whole(row["key"], narrow) and row["release"] not in narrow  # the release: -o wide
    assert whole("steps=3 topk=1 draft=4 (current)  412.5 [383.6, 437.3]  ", narrow)
    assert whole("455.2 [423.3, 482.5]", narrow) and "WINNER" in narrow and "FAILED" in narrow
    failed = " ".join(narrow[narrow.index("failed: steps=7") :].split())  # the reason under the table, whole
    assert failed.startswith(f"failed: steps=7 topk=4 draft=16: {TUNE_FAILURE}")
    assert "-o wide adds each candidate's release, tok/s @1" in narrow
    wide = _shown(wide=True)
    header = wide.splitlines()[2]
    assert "release" in header and "tok/s @1" in header and "interval" in header
    assert all(whole(row["release"], wide) for row in tune_data()["candidates"])
    assert whole(f"failed: {TUNE_FAILURE}", wide)


def test_show_of_a_tune_run_is_narrow_and_takes_o_wide(cli: Any, tmp_path: Path) -> None:
    path, data = tmp_path / "ledger.db", tune_data()
    book = Ledger(path)
    book.begin(
        data["run"],
        "tune",
        command="specctl tune p.yaml",
        profile={"metadata": {"name": "p", "version": 3}},
        hosts=["gpu-node-07"],
    )
    book.record_host(data["run"], "gpu-node-07", verdict=data, passed=None)
    book.finish(data["run"], "succeeded", verdict=None)
    book.close()
    narrow = cli("show", data["run"], "--ledger", str(path))
    assert narrow.code == 0, narrow.stderr
    table = narrow.stdout[narrow.stdout.index("tune llama") : narrow.stdout.index("heat map")]
    assert fits(table) and data["candidates"][0]["release"] not in table
    wide = cli("show", data["run"], "--ledger", str(path), "-o", "wide")
    assert wide.code == 0 and all(whole(row["release"], wide.stdout) for row in data["candidates"])
    assert cli("show", data["run"], "--ledger", str(path), "-o", "json").json()["id"] == data["run"]


# --- host keys: a fingerprint is never cut ---------------------------------------------------------------


def unknown_key_error(alias: str) -> HostError:
    """The error specctl raises for an unknown host key (hosts/_host_keys.py), as a connection would."""
    policy = KnownHostsPolicy(alias, None, accept_new=False)  # type: ignore[arg-type]
    try:
        policy.missing_host_key(paramiko.SSHClient(), "gpu-node-with-a-long-name.example.internal", KEY)
    except HostError as exc:
        return exc
    raise AssertionError("an unknown key was accepted")


@pytest.fixture
def locked_out(fake_hosts: Any, monkeypatch: pytest.MonkeyPatch) -> Path:
    """h0 answers; h1's key is unknown (every command on it fails as the SSH connection would)."""
    fake_hosts.add("h0", "h1")
    inventory = fake_hosts.inventory()
    reach = HostSpec.transport

    def transport(spec: HostSpec, **kwargs: Any) -> Transport:
        if spec.name != "h1":
            return reach(spec, **kwargs)

        def refused(*args: Any, **kwargs: Any) -> Any:
            raise unknown_key_error("h1")

        return Transport("h1", "127.0.0.9", refused)

    monkeypatch.setattr(HostSpec, "transport", transport)
    return inventory


def test_hosts_check_prints_the_fingerprint_whole_under_the_table(cli: Any, locked_out: Path) -> None:
    shown = fingerprint(KEY)
    assert shown.startswith("SHA256:") and len(shown) == 50
    result = cli("hosts", "--check", "--inventory", str(locked_out))
    assert result.code == 3 and fits(result.stdout), result.stdout
    assert whole(shown, result.stdout)
    assert any(line.split()[:2] == ["h1", "NO"] for line in result.stdout.splitlines())
    assert "h1: unknown host key ssh-rsa" in result.stdout and "h1: h1:" not in result.stdout
    wide = cli("hosts", "--check", "--inventory", str(locked_out), "-o", "wide")
    assert wide.code == 3 and any(
        "NO: h1: unknown host key" in line and shown in line for line in wide.stdout.splitlines()
    )
    listed = cli("hosts", "--inventory", str(locked_out))
    assert (
        listed.code == 0
        and fits(listed.stdout)
        and listed.stdout.splitlines()[1].split() == ["host", "ssh", "root", "python"]
    )


def test_status_says_an_unreachable_host_under_the_table(cli: Any, locked_out: Path, two_hosts: Path) -> None:
    result = cli("status", str(two_hosts), "--inventory", str(locked_out))
    assert result.code == 3 and fits(result.stdout), result.stdout
    assert whole(fingerprint(KEY), result.stdout) and "h1: h1:" not in result.stdout
    assert any(
        line.split()[:2] == ["h1", "-"] and line.split()[-1] == "unreachable" for line in result.stdout.splitlines()
    )
    wide = cli("status", str(two_hosts), "--inventory", str(locked_out), "-o", "wide")
    assert any(
        "unreachable: h1: unknown host key" in line and fingerprint(KEY) in line for line in wide.stdout.splitlines()
    )


def test_an_error_with_a_fingerprint_prints_it_whole(cli: Any, locked_out: Path, two_hosts: Path) -> None:
    result = cli("deploy", str(two_hosts), "--dry-run", "--inventory", str(locked_out), "--hosts", "h1")
    assert result.code == 3 and fits(result.stderr), result.stderr
    assert whole(fingerprint(KEY), result.stderr) and "fix: verify the fingerprint" in result.stderr


@pytest.mark.parametrize("columns", [80, 60])
def test_a_changed_key_shows_both_fingerprints_whole(columns: int) -> None:
    from specctl.cli._errors import report

    old, new = fingerprint(KEY), fingerprint(paramiko.RSAKey.generate(1024))
    error = HostError(  # as hosts/_ssh_runner.py words it
        "gpu-node-07: the host key CHANGED for jump host bastion-eu-west-1 (bastion.example.internal): "
        f"expected {old}, got {new}",
        host="gpu-node-07",
        fix="if the host was really reinstalled, remove the old key (ssh-keygen -R) after verifying the new one",
    )
    err = io.StringIO()
    assert (
        report(error, Output(stdout=io.StringIO(), stderr=err, environ={"NO_COLOR": "1", "COLUMNS": str(columns)})) == 3
    )
    assert fits(err.getvalue(), columns) and whole(old, err.getvalue()) and whole(new, err.getvalue())


# --- render ---------------------------------------------------------------------------------------------


def test_render_prints_no_line_over_80_columns(cli: Any, hub_env: Path) -> None:
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        result = cli("render", str(profile), "--force")
        assert result.code == 0 and fits(result.stdout), (profile, result.stdout)
        assert "\\\n  --" in result.stdout, profile  # the long command broken before its options
