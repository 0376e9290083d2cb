"""`runs`, `show` and `diff` on a real ledger: a table that fits 80 columns without cutting a cell,
short run ids that are accepted back, relative times, `-o wide`, and filters that refuse typos."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from specctl.ledger.ledger import Ledger


def _summary(accept: float | None, rate: float | None, tput: float) -> dict[str, Any]:
    return {
        "summary": {
            "accept_length": {"estimate": accept} if accept else None,
            "acceptance_rate": {"estimate": rate} if rate else None,
            "output_tokens_per_s": {"estimate": tput},
            "wall_tokens_per_s": tput * 0.9,
        }
    }


def test_a_summary_recorded_before_the_rename_reads_in_todays_words() -> None:
    from specctl.verdict.summary import current

    old = {
        "accept_length": {"estimate": 3.5},
        "decode_tokens_per_s": {"estimate": 1150.0},
        "output_tokens_per_s": 1001.2,
    }
    assert current(old) == {
        "accept_length": {"estimate": 3.5},
        "output_tokens_per_s": {"estimate": 1150.0},
        "wall_tokens_per_s": 1001.2,
        "decode_tokens_per_s": None,
    }


def seed_story(path: Path) -> list[str]:
    """The demo's story as runs: deploy v1, baseline, deploy v2 (failed), rollback <- deploy v2, unlock;
    started 3 h, 1 h, 20 min, 19 min and 5 s ago, on host `gpu-node-07` of group `fleet`."""
    book, now = Ledger(path), datetime.now(UTC)
    ago = [timedelta(hours=3), timedelta(hours=1), timedelta(minutes=20), timedelta(minutes=19), timedelta(seconds=5)]
    story = [
        ("deploy", 1, "succeeded", True, _summary(3.57, 0.84, 1172.4)),
        ("baseline", 1, "succeeded", True, _summary(None, None, 1004.2)),
        ("deploy", 2, "failed", False, _summary(1.92, 0.31, 726.0)),
        ("rollback", 1, "succeeded", True, _summary(3.55, 0.84, 1150.0)),
        ("unlock", 1, "succeeded", None, None),
    ]
    ids: list[str] = []
    for (kind, version, status, passed, verdict), back in zip(story, ago, strict=True):
        started = now - back
        run_id = started.strftime("%Y%m%dT%H%M%SZ") + f"-{len(ids):x}5e9a{len(ids) + 1:x}"
        book.begin(
            run_id,
            kind,
            command="specctl x",
            profile={"metadata": {"name": "tiny-llama-demo", "version": version}},
            hosts=["gpu-node-07"],
            parent=ids[2] if kind == "rollback" else None,
        )
        if verdict:
            book.record_host(run_id, "gpu-node-07", verdict=verdict, passed=passed)
        book.finish(run_id, status, verdict=None if passed is None else {"passed": passed})
        book.db.execute(
            "UPDATE runs SET started_at = ? WHERE id = ?", (started.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), run_id)
        )
        ids.append(run_id)
    book.close()
    return ids


@pytest.fixture
def ledger(tmp_path: Path) -> tuple[str, list[str]]:
    path = tmp_path / "ledger.db"
    return str(path), seed_story(path)


def runs_at_80(cli: Any, path: str, monkeypatch: pytest.MonkeyPatch) -> tuple[list[str], int]:
    """`runs` at 80 columns: its lines, none longer nor a cell cut short, and where the header is."""
    monkeypatch.setenv("COLUMNS", "80")
    result = cli("runs", "--ledger", path)
    assert result.code == 0, result.stderr
    lines = result.stdout.splitlines()
    assert "…" not in result.stdout and all(len(line) <= 80 for line in lines)
    return lines, next(i for i, line in enumerate(lines) if line.startswith("run "))


def test_runs_fit_80_columns_without_cutting_a_cell(
    cli: Any, ledger: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = ledger
    lines, start = runs_at_80(cli, path, monkeypatch)
    assert "".join(lines).startswith(f"runs ({path})")  # the ledger read first (folded when its path is long)
    assert lines[start].split() == ["run", "when", "kind", "profile", "result", "accept", "tok/s"]
    rows = [line.split() for line in lines[start + 1 :]]
    assert [r[0] for r in rows] == [i[-6:] for i in ids]  # short ids: the random suffix
    assert rows[0][1:4] == ["3", "h", "ago"] and rows[2][1:4] == ["20", "min", "ago"] and rows[4][2:4] == ["s", "ago"]
    assert " ".join(rows[3][4:]) == f"rollback ← {ids[2][-6:]} tiny-llama-demo v1 pass 3.55 1150"
    assert " ".join(rows[2][4:]) == "deploy tiny-llama-demo v2 FAIL 1.92 726"
    assert " ".join(rows[1][4:]) == "baseline tiny-llama-demo v1 pass - 1004"
    assert " ".join(rows[4][4:]) == "unlock tiny-llama-demo v1 ok - -"


def test_narrower_still_drops_columns_before_cutting(
    cli: Any, ledger: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "60")
    result = cli("runs", "--ledger", ledger[0])
    header = next(line for line in result.stdout.splitlines() if line.startswith("run ")).split()
    assert "when" not in header and header[:4] == ["run", "kind", "profile", "result"]
    assert "…" not in result.stdout


def test_wide_shows_every_column_and_whole_ids(
    cli: Any, ledger: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path, ids = ledger
    for flag in ("-o", "--output"):
        result = cli("runs", "--ledger", path, flag, "wide")
        assert result.code == 0 and "…" not in result.stdout
        for column in ("hosts", "status", "verdict", "acceptance", "speedup", "TTFT s", "started (UTC)", "took"):
            assert column in result.stdout
        assert all(run_id in result.stdout for run_id in ids) and f"rollback ← {ids[2]}" in result.stdout
        assert "gpu-node-07" in result.stdout and max(len(line) for line in result.stdout.splitlines()) > 80
    assert cli("runs", "--ledger", path, "-o", "tall").code == 2


def test_o_json_is_json(cli: Any, ledger: tuple[str, list[str]]) -> None:
    path, ids = ledger
    result = cli("runs", "--ledger", path, "-o", "json")
    assert result.code == 0 and result.json() == cli("--json", "runs", "--ledger", path).json()
    assert [r["id"] for r in result.json()["runs"]] == ids


def test_short_ids_are_accepted_back(cli: Any, ledger: tuple[str, list[str]]) -> None:
    path, ids = ledger
    shown = cli("--json", "show", ids[2][-6:], "--ledger", path)
    assert shown.code == 0 and shown.json()["id"] == ids[2]
    assert cli("--json", "show", ids[2][:17], "--ledger", path).json()["id"] == ids[2]  # a prefix, as before
    diff = cli("--json", "diff", ids[0][-6:], ids[2][-6:], "--ledger", path)
    assert diff.code == 0 and (diff.json()["a"], diff.json()["b"]) == (ids[0], ids[2])
    missing = cli("show", "abcdef", "--ledger", path)
    assert missing.code == 2 and "no run 'abcdef'" in missing.stderr


def test_short_ids_fall_back_to_whole_ids_when_they_collide(tmp_path: Path) -> None:
    from specctl.errors import InputError
    from specctl.ledger.history import find_run, short_ids

    a, b, c = "20261130T210811Z-53f951", "20261130T220811Z-53f951", "20261130T230811Z-0a0b0c"
    assert short_ids([a, b, c, "plain"]) == {a: a, b: b, c: "0a0b0c", "plain": "plain"}
    book = Ledger(tmp_path / "l.db")
    for run_id in (a, b, c):
        book.begin(run_id, "verify", command="c")
    with pytest.raises(InputError, match="matches 2 runs"):
        find_run(book, "53f951")
    assert find_run(book, "0a0b0c").id == c and find_run(book, a).id == a
    book.close()


def test_runs_filters(cli: Any, ledger: tuple[str, list[str]], tmp_path: Path) -> None:
    path, ids = ledger
    typo = cli("runs", "--kind", "deplyo", "--ledger", path)
    assert typo.code == 2 and "deploy, verify, baseline, rollback, unlock" in typo.stderr
    assert [r["id"] for r in cli("--json", "runs", "--kind", "deploy", "--ledger", path).json()["runs"]] == [
        ids[0],
        ids[2],
    ]
    for flag in ("--hosts", "--host"):
        assert len(cli("--json", "runs", flag, "gpu-node-07", "--ledger", path).json()["runs"]) == 5
        assert cli("--json", "runs", flag, "other", "--ledger", path).json()["runs"] == []
    assert (
        len(cli("--json", "runs", "--hosts", "other,gpu-node-07", "--limit", "2", "--ledger", path).json()["runs"]) == 2
    )
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text(
        "apiVersion: specctl/v1\nkind: Inventory\nhosts:\n  gpu-node-07: {ssh: n7}\n  gpu-node-08: {ssh: n8}\n"
        "groups:\n  fleet: [gpu-node-07, gpu-node-08]\n"
    )
    grouped = cli("--json", "runs", "--hosts", "fleet", "--inventory", str(inventory), "--ledger", path).json()["runs"]
    assert [r["id"] for r in grouped] == ids


def test_relative_times() -> None:
    from specctl.cli.views import ago

    now = datetime(2026, 11, 30, 21, 8, 11, tzinfo=UTC)
    assert ago("2026-11-30T21:08:01.000000Z", now) == "10 s ago"
    assert ago("2026-11-30T21:05:00.000000Z", now) == "3 min ago"
    assert ago("2026-11-30T16:00:00.000000Z", now) == "5 h ago"
    assert ago("2026-11-27T21:08:11.000000Z", now) == "3 d ago"
    assert ago("2026-11-30T21:09:00.000000Z", now) == "0 s ago"  # another machine's clock ahead


def test_operating_points_are_charted_compared_and_shown(cli: Any, tmp_path: Path) -> None:
    path = tmp_path / "ledger.db"
    book = Ledger(path)

    def point(c: int, tput: float, speedup: float) -> dict[str, Any]:
        summary = {
            "concurrency": c,
            "wall_tokens_per_s": tput * c,
            "output_tokens_per_s": {"estimate": tput},
            "speedup": {"estimate": speedup},
            "accept_length": {"estimate": 3.5},
        }
        gate = {
            "name": "speedup",
            "op": ">=",
            "threshold": 1.0,
            "passed": speedup >= 1.0,
            "decided": True,
            "note": "",
            "concurrency": c,
            "interval": {"estimate": speedup, "low": speedup - 0.1, "high": speedup + 0.1, "n": 8, "kind": "fixed"},
        }
        return {"concurrency": c, "summary": summary, "gates": [gate], "stopped_early": False}

    ids = []
    for n, (s1, s16) in enumerate([(1.6, 1.1), (1.5, 0.8)]):
        run_id = f"20261201T0{n}0000Z-0000{n}"
        points = [point(1, 500.0 * s1, s1), point(16, 100.0 * s16, s16)]
        verdict = {
            "passed": s16 >= 1.0,
            "summary": points[0]["summary"],
            "points": points,
            "gates": [g for p in points for g in p["gates"]],
            "profile": "p",
            "version": n + 1,
            "release": run_id,
        }
        book.begin(
            run_id, "deploy", command="specctl x", profile={"metadata": {"name": "p", "version": n + 1}}, hosts=["h"]
        )
        book.record_host(run_id, "h", verdict=verdict, passed=verdict["passed"])
        book.finish(run_id, "succeeded" if verdict["passed"] else "failed", verdict={"passed": verdict["passed"]})
        ids.append(run_id)
    book.close()
    diff = cli("--json", "diff", ids[0], ids[1], "--ledger", str(path)).json()["measurements"]
    fields = {row["field"]: (row["a"], row["b"]) for row in diff}
    assert fields["speedup@16"] == (1.1, 0.8) and fields["speedup@1"] == (1.6, 1.5) and fields["speedup"] == (1.6, 1.5)
    plot = cli("runs", "--plot", "--ledger", str(path)).stdout
    assert "speedup @16" in plot and "output tok/s @1" in plot
    shown = cli("show", ids[1], "--ledger", str(path)).stdout
    assert "speedup @16" in shown and "FAIL" in shown


@pytest.fixture
def fleet(tmp_path: Path) -> tuple[str, list[str]]:
    """Three runs on gpu-node-07 and gpu-node-08, recorded as verify records them: both hosts alike;
    gpu-node-08 failing its gate; gpu-node-08 recorded without its requests (an older ledger)."""
    from tests.ledger.test_pooled import record, record_baseline, requests

    path = tmp_path / "ledger.db"
    book = Ledger(path)
    base = requests(1.0, 40.0, seed=3)
    record_baseline(book, "20261201T080000Z-b0b0b0", "gpu-node-07", base)
    bases = {h: ("20261201T080000Z-b0b0b0", base) for h in ("gpu-node-07", "gpu-node-08")}
    alike = requests(3.5, 50.0, seed=1)
    ids = ["20261201T090000Z-a0a0a1", "20261201T100000Z-a0a0a2", "20261201T110000Z-a0a0a3"]
    record(book, ids[0], {"gpu-node-07": alike, "gpu-node-08": alike}, kind="deploy", baselines=bases)
    failing = {"gpu-node-07": requests(3.5, 50.0, seed=5), "gpu-node-08": requests(2.0, 35.0, seed=6)}
    record(book, ids[1], failing, kind="deploy", baselines=bases)
    two = {"gpu-node-07": requests(3.5, 50.0, seed=1), "gpu-node-08": requests(3.55, 52.0, seed=2)}
    record(book, ids[2], two, summary_only=("gpu-node-08",))
    book.close()
    return str(path), ids


def test_several_hosts_show_the_pooled_figure_and_the_hosts_that_differ(
    cli: Any, fleet: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    path, ids = fleet
    lines, start = runs_at_80(cli, path, monkeypatch)
    assert lines[start].split() == ["run", "when", "kind", "profile", "result", "accept", "tok/s"]
    rows = [line.split() for line in lines[start + 2 :]]  # the baseline first
    # alike hosts: the pooled figure (±, its interval's half-width) and how many hosts agree with it
    assert rows[0][0] == "a0a0a1" and rows[0][-3] == "pass" and "±" in rows[0][-2] and "±" in rows[0][-1]
    assert rows[1] == ["└", "2", "hosts", "agree"]
    # a failing host: the pooled figure, then each host that failed or whose interval leaves it out
    assert rows[2][0] == "a0a0a2" and rows[2][-3] == "FAIL"
    assert rows[3][:3] == ["└", "gpu-node-07", "pass"] and rows[4][:3] == ["└", "gpu-node-08", "FAIL"]
    assert float(rows[4][3].split("±")[0]) < float(rows[2][-2].split("±")[0]) < float(rows[3][3].split("±")[0])
    # a host recorded without its requests: no pooled figure, each host's own
    assert rows[5][0] == "a0a0a3" and rows[5][-2:] == ["-", "-"]
    assert [r[:3] for r in rows[6:8]] == [["└", "gpu-node-07", "pass"], ["└", "gpu-node-08", "pass"]]
    assert all("±" in r[3] for r in rows[6:8]) and len(rows) == 8


def test_several_hosts_wide_lists_every_host_with_its_interval(
    cli: Any, fleet: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path, ids = fleet
    out = cli("runs", "--ledger", path, "-o", "wide").stdout
    assert out.count("└ gpu-node-07") == 3 and out.count("└ gpu-node-08") == 3
    line = next(line for line in out.splitlines() if ids[0] in line)
    assert "gpu-node-07,gpu-node-08" in line
    assert re.search(r"\d±[\d.]+x |\dx \[", line)  # the pooled speedup, with its interval


def test_several_hosts_json_has_pooled_and_per_host_figures(cli: Any, fleet: tuple[str, list[str]]) -> None:
    path, ids = fleet
    runs = {r["id"]: r for r in cli("--json", "runs", "--ledger", path).json()["runs"]}
    alike = runs[ids[0]]
    assert alike["pooled"]["hosts"] == ["gpu-node-07", "gpu-node-08"]
    assert alike["accept_length"] == alike["intervals"]["accept_length"]["estimate"]
    assert alike["intervals"]["accept_length"]["n"] == 48 and alike["speedup"] is not None
    assert [h["host"] for h in alike["per_host"]] == ["gpu-node-07", "gpu-node-08"]
    assert all(h["intervals"]["accept_length"]["n"] == 24 for h in alike["per_host"])
    unknown = runs[ids[2]]
    assert unknown["accept_length"] is None and all(h["accept_length"] for h in unknown["per_host"])
    assert "not its requests" in unknown["pooled"]["notes"][0]


def test_show_and_diff_of_several_hosts(
    cli: Any, fleet: tuple[str, list[str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    path, ids = fleet
    shown = cli("show", ids[1][-6:], "--ledger", path)
    assert shown.code == 0 and all(len(line) <= 80 for line in shown.stdout.splitlines())
    out = shown.stdout
    assert out.index("gpu-node-07: tiny-llama-demo") < out.index("gpu-node-08: tiny-llama-demo")
    assert out.index("gpu-node-08: tiny-llama-demo") < out.index("pooled over gpu-node-07, gpu-node-08  (48 requests)")
    assert "speedup (output tok/s)" in out and "total tok/s, summed" in out
    data = cli("--json", "show", ids[1][-6:], "--ledger", path).json()
    assert data["pooled"]["points"][0]["summary"]["requests"] == 48
    assert cli("--json", "show", "b0b0b0", "--ledger", path).json()["pooled"] is None  # one host

    diff = cli("diff", ids[0][-6:], ids[1][-6:], "--ledger", path)
    assert diff.code == 0 and all(len(line) <= 80 for line in diff.stdout.splitlines())
    lines = [line.rstrip() for line in diff.stdout.splitlines()]
    assert [line for line in lines if line in ("gpu-node-07", "gpu-node-08", "pooled")] == [
        "gpu-node-07",
        "gpu-node-08",
        "pooled",
    ]
    pooled = lines[lines.index("pooled") + 1].split()
    figures = " ".join(pooled[1:])  # a's and b's, each with its interval: `2.55±0.21` or `2.55 [2.31, 2.80]`
    assert pooled[0] == "accept_length" and figures.count("±") + figures.count(" [") == 2
