"""What `stage` prints for people, on given reports (the staging itself is tests/integration/test_staging.py's):
a re-fetch (a file at its size in the cache whose content did not match the Hub's checksum, fetched
again) is said in the `--verify` table as in the plain one, never hidden behind "verified"."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from specctl.flows import stage as stage_flow
from specctl.release.staging import Staged
from tests.fakes.inputs import fast_inputs

REPO = "specctl-test/tiny-llama"


@pytest.mark.parametrize("verify", [True, False])
def test_a_refetch_is_said_in_the_stage_table_verify_or_not(
    tmp_path: Path, cli: Any, fake_engine: Any, monkeypatch: pytest.MonkeyPatch, verify: bool
) -> None:
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)  # --verify asks the Hub (here, nothing: the models are paths)
    v1, _ = fast_inputs(tmp_path / "work", fake_engine)
    refetched = Staged(
        REPO,
        "c" * 40,
        "/cache/snap",
        bytes=5_000_000,
        fetched=0,
        hashed=5_000_000,
        refetched=("model.safetensors",),
        refetched_bytes=3_700_000,
    )

    def stage_hosts(ctx: Any, report: Any, hosts: Any, **how: Any) -> list[stage_flow.StageReport]:
        assert how["verify"] is verify
        return [stage_flow.StageReport("local", True, staged=[refetched])]

    monkeypatch.setattr(stage_flow, "stage_hosts", stage_hosts)
    shown = cli("stage", str(v1), *(["--verify"] if verify else []), "-o", "wide")
    assert shown.code == 0, shown.stdout + shown.stderr
    said = " ".join(shown.stdout.split())
    assert "re-fetched 1 file (3.7 MB) whose content did not match the Hub's checksum" in said, said
    if verify:
        assert "verified: 5.0 MB hashed again" in said, said
