"""`watch`'s choices, as logic: durations, when an automatic action may be taken, whether a
rollback could fix a drop, the exit status, and the node-exporter textfile."""

from __future__ import annotations

from pathlib import Path

import pytest

from specctl.cli.watch_cmds import duration
from specctl.errors import InputError
from specctl.flows.watch import HostWindow, exit_status, may_act, rollback_differences, textfile
from specctl.ledger.records import WatchWindow
from specctl.profile.profile import Profile
from specctl.verdict.drift import WindowVerdict
from specctl.verdict.prometheus import parse
from specctl.verdict.stats import Interval
from specctl.verdict.window import Window


def test_durations_are_written_as_people_write_them() -> None:
    assert [duration(t) for t in ("45s", "5m", "1h", "1h30m", "90", "1.5m")] == [45, 300, 3600, 5400, 90, 90]
    for bad in ("", "5x", "m", "0s", "-5m", "5 m"):
        with pytest.raises(InputError, match="not a duration"):
            duration(bad)


def _window(release: str, action: str | None, ended: str, host: str = "h0") -> WatchWindow:
    return WatchWindow(
        "w", host, release, "p", ended, ended, "degraded", 3, 2.0, 1.8, 2.2, 3.0, "counters", 20, action, None
    )


def test_one_automatic_action_per_release_then_a_cool_down_per_host() -> None:
    at = 1_764_756_000.0  # 2025-12-03T10:00:00Z
    assert may_act([], "h0", "r1", at, 3600) is None
    alerted = [_window("r1", "alert", "2025-12-03T09:59:00Z")]
    assert may_act(alerted, "h0", "r1", at, 3600) is None  # an alert is no action
    acted = [_window("r1", "plain: r1-plain", "2025-12-03T09:30:00Z")]
    assert "already taken on r1" in (may_act(acted, "h0", "r1", at, 3600) or "")
    assert "cooling down" in (may_act(acted, "h0", "r2", at, 3600) or "")  # the release it moved to, too soon
    assert may_act(acted, "h0", "r2", at, 600) is None  # after the cool-down
    assert may_act(acted, "h1", "r1", at, 3600) is None  # another host
    refused = [_window("r1", "refused: same drafter", "2025-12-03T09:59:00Z")]
    assert may_act(refused, "h0", "r1", at, 3600) is None


def _profile(**changes: object) -> Profile:
    data: dict[str, object] = {
        "metadata": {"name": "p", "version": 1},
        "target": {"model": "/m/target"},
        "drafter": {"model": "/m/drafter", "manifest": "m.yaml", "layer_ids": [1, 2, 3]},
        "hardware": {"gpu": "b200", "gpus_per_node": 1},
        "engine": {"name": "sglang", "version": "0.5.23"},
        **changes,
    }
    return Profile.model_validate(data, strict=False)


def test_a_rollback_must_change_what_decides_acceptance() -> None:
    serving = _profile()
    assert rollback_differences(serving, _profile(metadata={"name": "p", "version": 2})) == []
    assert rollback_differences(
        serving, _profile(drafter={"model": "/m/drafter", "manifest": "m.yaml", "layer_ids": [2, 30, 58]})
    ) == ["drafter"]
    assert rollback_differences(serving, _profile(speculative={"num_steps": 5})) == ["speculative"]
    assert rollback_differences(serving, _profile(engine={"name": "sglang", "version": "0.5.22"})) == ["engine"]


def _verdict(state: str) -> WindowVerdict:
    interval = Interval(2.0, 1.8, 2.2, 20, "fixed") if state != "unknown" else None
    return WindowVerdict(state, 1 if interval else 0, interval, 3.1, "the gate 3", "why")  # type: ignore[arg-type]


def test_the_exit_status_says_what_cron_needs_to_know() -> None:
    ok, degraded = HostWindow("h0", "r", verdict=_verdict("ok")), HostWindow("h1", "r", verdict=_verdict("degraded"))
    unknown, gone = HostWindow("h2", "r", verdict=_verdict("unknown")), HostWindow("h3", None, error="cannot connect")
    assert exit_status([ok, unknown]) == 0
    assert exit_status([ok, degraded]) == 1
    assert exit_status([ok, degraded, gone]) == 3
    acted = HostWindow("h1", "r", verdict=_verdict("degraded"), action="plain: r-plain")
    assert exit_status([acted, gone]) == 4
    refused = HostWindow("h1", "r", verdict=_verdict("degraded"), action="refused: same drafter")
    assert exit_status([refused]) == 1
    down = HostWindow("h4", "r", down="r is current on h4, but no server of it runs")
    unreadable = HostWindow("h5", "r", unreadable="its /metrics page is not the Prometheus text format")
    assert (down.state, unreadable.state) == ("down", "unreadable")
    assert exit_status([ok, down]) == 3  # a current with no server is a host failure, not `unknown`
    assert exit_status([ok, unreadable]) == 0  # nothing decided, as unknown


def test_the_textfile_is_prometheus_text_that_node_exporter_reads(tmp_path: Path) -> None:
    rows = [
        HostWindow("h0", "r1", Window(0, 1_764_756_000.0, "counters"), _verdict("degraded")),
        HostWindow("h1", None, error="cannot connect"),
        HostWindow("h2", "r2", down="r2 is current on h2, but no server of it runs"),
    ]
    path = textfile(tmp_path / "collector", "p", rows)
    samples = parse(path.read_text())
    values = {(s.name, s.label("host"), s.label("state")): s.value for s in samples}
    assert values[("specctl_watch_accept_length", "h0", None)] == 2.0
    assert values[("specctl_watch_floor", "h0", None)] == 3.1
    assert values[("specctl_watch_state", "h0", "degraded")] == 1 and values[("specctl_watch_state", "h0", "ok")] == 0
    assert values[("specctl_watch_state", "h1", "unreachable")] == 1
    assert values[("specctl_watch_state", "h2", "down")] == 1 and values[("specctl_watch_state", "h2", "ok")] == 0
    assert "# TYPE specctl_watch_state gauge" in path.read_text()  # prometheus_client's registry wrote it
    assert values[("specctl_watch_window_end_seconds", "h0", None)] == 1_764_756_000.0
    assert [p.name for p in path.parent.iterdir()] == ["specctl_watch_p.prom"]  # no temporary left behind
