"""A rollback's recap says the restarted server's time limit, as a deploy's does (a scheduler's job
ends at it, however short), in the fast tier: a fake host whose platform is made to report a limit
for one release; the recap and `--json` carry it. The Slurm job's own limit is read by
`SlurmPlatform.time_limit` (tests/release/test_slurm_platform.py) and shown after a real deploy in
tests/integration/test_slurm_deploy.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specctl.release.platform import ProcessPlatform
from specctl.release.release import Release
from tests.fakes.inputs import fast_inputs

BUDGET = ("--startup-timeout", "20")
LIMIT = "job 7: time limit 1:00, serving stops at 2026-12-05T03:00:00Z"


def test_a_rollbacks_recap_says_the_time_limit_of_the_server_it_started(
    tmp_path: Path, cli: Any, fake_engine: Any, fake_hosts: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_hosts.add("h0")
    monkeypatch.setenv("SPECCTL_INVENTORY", str(fake_hosts.inventory()))
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, v2 = fast_inputs(tmp_path / "work", fake_engine, engine={"host": "0.0.0.0"}, hosts=["h0"])
    try:
        first = cli("--json", "deploy", *BUDGET, str(v1))
        assert first.code == 0, first.stdout + first.stderr
        run1 = first.json()["hosts"][0]["release"]
        assert cli("deploy", *BUDGET, str(v2), "--skip-check", "--no-verify").code == 0
        limited = {run1}  # the release whose server the platform says a limit of

        def time_limit(self: ProcessPlatform, release: Release) -> str | None:
            return LIMIT if release.run_id in limited else None

        monkeypatch.setattr(ProcessPlatform, "time_limit", time_limit)
        back = cli("--json", "rollback", str(v1), "--to", run1)
        assert back.code == 0, back.stdout + back.stderr
        [host] = back.json()["hosts"]
        assert host["release"] == run1 and host["time_limit"] == LIMIT, host
        shown = cli("rollback", str(v1), "--to", run1)
        assert shown.code == 0, shown.stdout + shown.stderr
        assert f"h0: {LIMIT}" in shown.stdout.splitlines(), shown.stdout
    finally:
        cli("stop", str(v1))
