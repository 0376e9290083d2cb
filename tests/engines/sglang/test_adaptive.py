"""Adaptive speculation as each sglang release has it: from which release, its built-in tiers, and
the settings under which it silently falls back to static parameters (data/adaptive.json, from
every release's code by scripts/gen_sglang_adaptive.py)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from specctl.engines import get_engine
from specctl.engines.sglang.engine import _adaptive_row
from tests.engines.sglang.conftest import Wheels, script

SGLANG = get_engine("sglang")


def found(
    version: str, *, topk: int | None = 1, args: dict[str, object] | None = None, tiers: dict[str, object] | None = None
) -> list[tuple[str, bool, str]]:
    return [(p.code, p.error, p.message) for p in SGLANG.adaptive_problems(version, "EAGLE3", topk, args or {}, tiers)]


def test_a_release_without_it_fails_to_start() -> None:
    [(code, error, message)] = found("0.5.10")
    assert code == "spec-adaptive" and error and "unknown flag" in message


def test_settings_that_turn_it_off_are_a_warning_naming_them() -> None:
    assert found("0.5.23") == []
    [(_, error, message)] = found("0.5.23", topk=4, args={"enable-dp-attention": True})
    assert not error and "eagle_topk 4" in message and "enable-dp-attention" in message
    assert found("0.5.23", args={"enable_two_batch_overlap": False}) == []  # off is not on


def test_the_first_releases_need_the_overlap_scheduler_off() -> None:
    [(_, error, message)] = found("0.5.11")
    assert not error and "disable-overlap-schedule" in message
    assert found("0.5.11", args={"disable-overlap-schedule": True}) == []
    assert found("0.5.12") == []


def test_tiers_by_batch_size_need_a_release_that_has_them() -> None:
    tiers = {"1": {"candidate_steps": [1, 3]}, "8": {"candidate_steps": [0, 1]}}
    [(_, error, message)] = found("0.5.12", tiers=tiers)
    assert error and "0.5.13" in message
    assert found("0.5.13", tiers=tiers) == []


def test_the_built_in_tiers_follow_the_release() -> None:
    assert SGLANG.adaptive_tiers("0.5.10") is None
    assert SGLANG.adaptive_tiers("0.5.12") == {"1": {"candidate_steps": [1, 3, 7]}}
    tiers = SGLANG.adaptive_tiers("0.5.23")
    assert tiers is not None and {bs: t["candidate_steps"] for bs, t in tiers.items()} == {
        "1": [1, 3, 5, 7],
        "8": [0, 1, 3],
        "32": [0, 1],
        "64": [0],
    }


@pytest.mark.conformance
def test_the_installed_release_has_the_tiers_the_table_says(sglang_python: str) -> None:
    code = (
        "import json; from sglang.srt.speculative.adaptive_spec_params import DEFAULT_ADAPTIVE_CONFIG as c; "
        "import sglang; print(json.dumps({'version': sglang.__version__, 'tiers': c}))"
    )
    done = subprocess.run(
        [sglang_python, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "HF_HUB_OFFLINE": "1"},
    )
    assert done.returncode == 0, done.stderr[-2000:]
    answer = json.loads(done.stdout.strip().splitlines()[-1])
    assert SGLANG.adaptive_tiers(answer["version"]) == answer["tiers"]


@pytest.mark.conformance
def test_the_shipped_rows_are_what_every_cached_release_says(cached_wheels: Wheels) -> None:
    gen = script("gen_sglang_adaptive")
    for version in cached_wheels.releases:  # per release: a cache of the conformance sample still checks
        row = _adaptive_row(version)
        shipped = None if row is None else {k: v for k, v in row.items() if k != "from"}
        assert shipped == gen.adaptive_of(cached_wheels.wheel(version)), version
