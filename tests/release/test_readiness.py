"""Readiness when the host's connection is lost: a drop that comes back costs polls; one that stays
down past LOGIN_BLIP_BUDGET_S is the lost connection it is, before the start-up budget runs out."""

from __future__ import annotations

import time
from types import SimpleNamespace
from typing import Any

import pytest

from specctl.errors import ConnectionLost
from specctl.release import readiness
from specctl.release.platform import Observation


class _Platform:
    on_host = False
    poll_s = 0.01

    def __init__(self, down_for: int | None) -> None:
        self.looks, self.down_for = 0, down_for  # None: down for good

    def observe(self, release: Any, handle: int) -> Observation:
        self.looks += 1
        if self.down_for is None or self.looks <= self.down_for:
            raise ConnectionLost("login: cannot connect", host="login", fix="check the login node")
        return Observation(False, ["boom"], None, ended="job 7 ended: FAILED")


def _wait(platform: _Platform) -> None:
    release = SimpleNamespace(transport=SimpleNamespace(name="login", address="login"))
    readiness.wait_ready(platform, release, 1, (), handle=7, budget_s=60, poll_s=0.01)  # type: ignore[arg-type]


def test_a_connection_down_past_the_budget_counts_and_one_that_comes_back_does_not(monkeypatch: Any) -> None:
    monkeypatch.setattr(readiness, "LOGIN_BLIP_BUDGET_S", 0.3)
    began = time.monotonic()
    with pytest.raises(ConnectionLost, match="stayed lost for more than 0 s while the server started") as lost:
        _wait(_Platform(None))
    assert time.monotonic() - began < 5 and lost.value.fix == "check the login node"
    with pytest.raises(readiness.StartupFailed, match="FAILED"):  # back after a few looks: its own answer counts
        _wait(_Platform(3))
