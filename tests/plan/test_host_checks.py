"""Static checks against host facts: each code fails on a wrong host and passes on a right one."""

from __future__ import annotations

from typing import Any

from specctl.engines import get_engine
from specctl.plan.host_checks import check_host
from specctl.profile.profile import Profile

PROFILE: dict[str, Any] = {
    "metadata": {"name": "p", "version": 1},
    "target": {"model": "/m"},
    "hardware": {"gpu": "b200", "gpus_per_node": 2},
    "engine": {"name": "sglang", "version": "0.5.23", "python": "/venv/bin/python", "port": 30000},
}
GOOD = {
    "host": "h",
    "gpus": [{"name": "NVIDIA B200", "memory_mib": 183359}] * 2,
    "python": "3.12.3",
    "engine_version": "0.5.23",
}


def codes(profile: dict[str, Any], facts: dict[str, Any]) -> list[str]:
    p = Profile.model_validate(profile)
    return [f.code for f in check_host(p, facts, get_engine(p.engine.name))]


def test_a_matching_host_passes() -> None:
    assert codes(PROFILE, GOOD) == []


def test_each_mismatch_has_its_code() -> None:
    assert codes(PROFILE, {**GOOD, "gpus": GOOD["gpus"][:1]}) == ["host-gpu-count"]
    assert codes(PROFILE, {**GOOD, "gpus": [{"name": "NVIDIA H100 80GB HBM3"}] * 2}) == ["host-gpu-model"]
    assert codes(PROFILE, {**GOOD, "engine_version": "0.5.14"}) == ["host-engine-version"]
    assert codes(PROFILE, {**GOOD, "engine_version": None}) == ["host-engine-version"]
    assert codes(PROFILE, {**GOOD, "python": None}) == ["host-python"]


def test_the_reference_engine_emulates_any_version_on_the_cpu() -> None:
    profile = {
        **PROFILE,
        "hardware": {"gpu": "cpu", "gpus_per_node": 1},
        "engine": {**PROFILE["engine"], "name": "reference"},
    }
    assert codes(profile, {**GOOD, "gpus": [], "engine_version": "0.1.0"}) == []
