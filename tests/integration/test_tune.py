"""`specctl tune` on a real OpenSSH host with the reference engine: the tiny models over num_steps
[1, 3, 5] (topk 1), each candidate a release; the ledger's tune run holds every candidate's
requests, the winner is written as the next profile version, the host keeps its release; then
--apply deploys and verifies the winner."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import yaml

from specctl.flows.demo import write_inputs
from specctl.ledger.ledger import Ledger
from specctl.profile import load_profile
from tests.integration.sshd import SshLab

NAME = "tune-demo"
HOST = "h1"
PORT = 31801


def _link(lab: SshLab, link: str) -> str | None:
    path = lab.hosts[HOST].root / NAME / link
    return path.resolve().name if path.is_symlink() else None


def tune_profile(lab: SshLab, tmp_path: Path, port: int, name: str, tune: dict[str, Any]) -> tuple[Path, list[str]]:
    """The demo's v1 on HOST under `name` with a `tune:` grid, an inventory and ledger: (profile, common args)."""
    v1, _ = write_inputs(tmp_path, port)
    data = yaml.safe_load(v1.read_text())
    data["metadata"]["name"] = name
    data["engine"]["host"] = "0.0.0.0"
    data["hosts"] = [HOST]
    data["tune"] = tune
    v1.write_text(yaml.safe_dump(data, sort_keys=False))
    inventory = lab.inventory(tmp_path / "hosts.yaml", sys.executable)
    return v1, [
        "--inventory",
        str(inventory),
        "--ssh-config",
        str(lab.ssh_config),
        "--ledger",
        str(tmp_path / "ledger.db"),
    ]


def test_tune_finds_a_setting_writes_the_next_version_and_applies_it(cli: Any, lab: SshLab, tmp_path: Path) -> None:
    v1, common = tune_profile(lab, tmp_path, PORT, NAME, {"num_steps": [1, 3, 5], "eagle_topk": [1], "requests": 16})
    data = yaml.safe_load(v1.read_text())
    data["verify"]["concurrency"] = [1, 4]  # the objective is the highest point; the other one is shown beside it
    v1.write_text(yaml.safe_dump(data, sort_keys=False))
    ledger = tmp_path / "ledger.db"
    try:
        assert cli("deploy", str(v1), "--no-verify", *common).code == 0
        before = _link(lab, "current")

        page = tmp_path / "tune.html"
        tuned = cli("--json", "tune", str(v1), "--host", HOST, "--html", str(page), *common)
        assert tuned.code == 0, tuned.stdout + tuned.stderr
        result = tuned.json()
        rows = result["candidates"]
        assert [r["speculative"]["num_steps"] for r in rows] == [3, 1, 5] and rows[0][
            "incumbent"
        ]  # the profile's own first
        assert all(r["release"] and (r["requests"] == 16 or r["eliminated"]) for r in rows)
        assert result["requests"] == sum(r["requests"] for r in rows) <= result["exhaustive_requests"] == 48
        winner = result["winner"]
        assert (
            winner["winner"]
            and not winner["eliminated"]
            and winner["estimate"] == max(r["estimate"] for r in rows if not r["eliminated"])
        )
        assert result["heat_map"]["row_values"] == [1, 3, 5]
        assert result["objective"]["concurrency"] == 4
        assert result["other_point_requests"] == 8 * sum(not r["eliminated"] for r in rows)
        for r in rows:  # concurrency 1 measured for the candidates still in the running when they were measured
            if r["eliminated"]:
                assert r["points"] == {}
            else:
                assert r["points"]["1"]["requests"] == 8 and r["points"]["1"]["output_tokens_per_s"]["estimate"] > 0
        html = page.read_text()
        assert "<svg" in html and "num_steps (draft steps per verify)" in html and result["run"] in html

        # the host keeps the release it had: same `current`, its server running again
        assert _link(lab, "current") == before == result["restored"]
        status = cli("--json", "status", str(v1), *common[:4]).json()["hosts"][0]
        assert status["current"] == before and status["running"]

        # the next profile version: beside the profile, extends it, the winner's settings, the run named
        written = Path(result["profile_file"])
        assert written == v1.parent / f"{NAME}-v2.yaml"
        assert result["run"] in written.read_text().splitlines()[0]
        loaded = load_profile(written).model
        assert loaded.metadata.version == 2 and loaded.metadata.name == NAME
        assert loaded.speculative.model_dump(mode="json") == winner["speculative"]

        # the ledger's tune run: every candidate's requests, the winner; the releases on the host
        runs = cli("--json", "runs", "--ledger", str(ledger)).json()["runs"]
        assert [(r["kind"], r["status"]) for r in runs] == [("deploy", "succeeded"), ("tune", "succeeded")]
        book = Ledger(ledger, readonly=True)
        try:
            run = book.get(result["run"])
        finally:
            book.close()
        [record] = run.host_records
        assert record.release == winner["release"] and record.passed
        assert record.measurements is not None
        measured = {c["key"]: len(c["requests"]) for c in record.measurements["candidates"]}
        assert measured == {r["key"]: r["requests"] for r in rows}
        assert record.verdict is not None and record.verdict["winner"]["key"] == winner["key"]
        for r in rows:  # each candidate is a whole release, marked so rollback never picks it by itself
            release = lab.hosts[HOST].root / NAME / "releases" / r["release"]
            profile = json.loads((release / "profile.json").read_text())
            assert profile["speculative"]["num_steps"] == r["speculative"]["num_steps"]
            assert result["run"] in profile["metadata"]["description"]
            kept = json.loads((release / "record.json").read_text())["verification"]
            assert kept["tune_candidate"] and kept["state"] == "none"

        again = cli("tune", str(v1), "--host", HOST, *common, "--out", str(written))  # never overwrites a file
        assert again.code == 2 and "exists" in again.stderr

        shown = cli("show", result["run"], "--ledger", str(ledger))  # the run shows as tune showed it
        assert shown.code == 0 and "WINNER" in shown.stdout and "heat map" in shown.stdout, shown.stdout
        wide = cli("show", result["run"], "--ledger", str(ledger), "-o", "wide")  # the other points, the releases
        assert wide.code == 0 and "tok/s @1" in wide.stdout and all(r["release"] in wide.stdout for r in rows)

        # a candidate is a whole release: rollback goes to one by name (never by itself: it was not verified)
        loser = next(r for r in rows if not r["winner"])
        back = cli("--json", "rollback", str(v1), "--to", loser["release"], *common)
        assert back.code == 0, back.stdout + back.stderr
        assert _link(lab, "current") == loser["release"]

        # --apply: the winner deployed and verified like any deploy
        applied = cli(
            "--json", "tune", str(v1), "--host", HOST, "--apply", "--out", str(tmp_path / "applied.yaml"), *common
        )
        assert applied.code == 0, applied.stdout + applied.stderr
        outcome = applied.json()
        assert outcome["applied"]["ok"] and outcome["applied"]["verdict"]["passed"]
        now = _link(lab, "current")
        assert now not in (before, None) and now == outcome["applied"]["release"]
        deployed = json.loads((lab.hosts[HOST].root / NAME / "releases" / now / "profile.json").read_text())
        assert deployed["metadata"]["version"] == 3  # v2 names the first tune's file: the next free version
        assert deployed["speculative"] == outcome["winner"]["speculative"]
    finally:
        cli("stop", str(v1), *common[:4])


def test_a_host_that_cannot_be_given_back_says_what_it_runs(cli: Any, lab: SshLab, tmp_path: Path) -> None:
    """The original release lost its launch script during the tune: giving the host back fails, and
    the error names the candidate left current and how to go back; the run is recorded as failed."""
    v1, common = tune_profile(
        lab, tmp_path, PORT + 1, NAME + "-back", {"num_steps": [2, 3], "eagle_topk": [1], "requests": 8}
    )
    ledger = tmp_path / "ledger.db"
    try:
        assert cli("deploy", str(v1), "--no-verify", *common).code == 0
        base = lab.hosts[HOST].root / (NAME + "-back")
        original = (base / "current").resolve()
        (original / "launch.sh").unlink()  # the server keeps running; the release can no longer be started
        tuned = cli("--json", "tune", str(v1), "--host", HOST, *common)
        assert tuned.code == 3, tuned.stdout + tuned.stderr
        error = tuned.json()["error"]
        left = (base / "current").resolve().name
        assert left != original.name and f"`current` is {left} (a tune candidate)" in error["message"], error
        assert f"--to {original.name}" in error["fix"]
        runs = cli("--json", "runs", "--ledger", str(ledger)).json()["runs"]
        assert runs[-1]["kind"] == "tune" and runs[-1]["status"] == "failed"
    finally:
        cli("stop", str(v1), *common[:4])
