"""The report's figures (cli/plots.py) and pages (cli/pages.py): every chart has a title, axis labels
with units, a legend, its intervals and what it is compared with; the pages embed them as SVG; a
missing matplotlib is said with the command that installs it. The last test writes the reports of a
real deploy (the engine double, a ledger) through the CLI."""

from __future__ import annotations

import random
import sys
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("matplotlib")

from matplotlib.axes import Axes
from matplotlib.collections import PolyCollection
from matplotlib.container import ErrorbarContainer

from specctl.cli import pages, plots
from specctl.errors import InputError
from specctl.plan.candidates import heat_map
from specctl.verdict import gates, stats
from specctl.verdict.measure import Measurement
from specctl.verdict.points import baseline_from_dict, point_level
from specctl.verdict.sequence import replay
from tests.fakes.inputs import fast_inputs, write_profile


def iv(estimate: float, half: float, kind: str = "fixed") -> dict[str, Any]:
    return {"estimate": estimate, "low": estimate - half, "high": estimate + half, "n": 32, "kind": kind}


def legend(ax: Axes) -> list[str]:
    found = ax.get_legend()
    assert found is not None, ax.get_title()
    return [t.get_text() for t in found.get_texts()]


def error_bars(ax: Axes) -> list[ErrorbarContainer]:
    return [c for c in ax.containers if isinstance(c, ErrorbarContainer)]


def horizontal_at(ax: Axes, y: float) -> bool:
    return any(list(line.get_ydata()) == [y, y] for line in ax.get_lines())  # type: ignore[arg-type]


def requests(rng: random.Random, n: int, accept: float, verify_s: float = 0.012) -> list[dict[str, Any]]:
    """Recorded requests as the ledger keeps them (Measurement.to_dict), accept lengths around `accept`."""
    out = []
    for _ in range(n):
        tokens = rng.randint(48, 72)
        verifies = max(1, round(tokens / rng.uniform(accept - 0.6, accept + 0.6)))
        out.append(
            {
                "completion_tokens": tokens,
                "spec_verify_ct": verifies,
                "spec_accept_length": tokens / verifies,
                "spec_num_correct_drafts": tokens - verifies,
                "spec_num_proposed_drafts": 3 * verifies,
                "e2e_latency": verify_s * verifies,
                "first_token_latency": 0.02,
                "client_latency": verify_s * verifies + 0.01,
            }
        )
    return out


def baseline_requests(rng: random.Random, n: int) -> list[dict[str, Any]]:
    out = []
    for _ in range(n):
        tokens = rng.randint(48, 72)
        out.append({"completion_tokens": tokens, "e2e_latency": 0.01 * tokens, "client_latency": 0.01 * tokens})
    return out


POINTS = [
    {
        "concurrency": c,
        "stopped_early": c == 4,
        "summary": {"accept_length": iv(3.3, 0.15), "output_tokens_per_s": iv(tput, tput / 20), "speedup": iv(s, 0.2)},
        "gates": [
            {"name": "accept_length", "op": ">=", "threshold": 3.0, "interval": iv(3.3, 0.15), "concurrency": c},
            {"name": "speedup", "op": ">=", "threshold": 1.3, "interval": iv(s, 0.2), "concurrency": c},
        ],
    }
    for c, tput, s in [(1, 180.0, 1.8), (4, 610.0, 1.5)]
]


def test_per_point_speedup_against_the_baseline_and_the_gate() -> None:
    fig = plots.speedup_figure(POINTS, title="operating points: h0", baseline={1: iv(100.0, 3.0), 4: iv(400.0, 9.0)})
    tput, speedup = fig.axes
    assert fig.get_suptitle() == "operating points: h0" and tput.get_title() and speedup.get_title()
    for ax in (tput, speedup):
        assert ax.get_xlabel() == "concurrency (requests in flight)"
        assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "4"]
    assert tput.get_ylabel() == "output throughput (tok/s)"
    assert speedup.get_ylabel() == "speedup (x baseline output throughput)"
    assert legend(tput) == ["speculative, with interval", "baseline (target alone), with interval"]
    assert legend(speedup) == ["baseline = 1.0x", "gate (min_speedup)", "speedup, with interval"]
    [bars] = error_bars(speedup)
    assert len(error_bars(tput)) == 2 and bars.has_yerr
    assert horizontal_at(speedup, 1.0)  # the target alone, what a speedup is measured against
    gate = next(line for line in speedup.get_lines() if line.get_label() == "gate (min_speedup)")
    assert list(gate.get_ydata()) == [1.3, 1.3]  # type: ignore[arg-type]


def test_per_point_speedup_without_a_baseline_says_so() -> None:
    points = [{**p, "summary": {**p["summary"], "speedup": None}, "gates": p["gates"][:1]} for p in POINTS]  # type: ignore[dict-item]
    fig = plots.speedup_figure(points, title="t")
    speedup = fig.axes[1]
    assert "no baseline measured: speedup unknown" in [t.get_text() for t in speedup.texts]
    assert legend(speedup) == ["baseline = 1.0x"]


def recorded_run(rng: random.Random) -> tuple[dict[str, Any], dict[str, Any], dict[int, Measurement]]:
    measurements = {
        "points": [
            {"concurrency": 1, "wall_s": 3.0, "requests": requests(rng, 32, 3.3)},
            {"concurrency": 4, "wall_s": 2.0, "requests": requests(rng, 14, 3.3)},  # stopped early
        ]
    }
    base = {"points": [{"concurrency": c, "wall_s": 5.0, "requests": baseline_requests(rng, 32)} for c in (1, 4)]}
    return {"points": POINTS}, measurements, baseline_from_dict(base)


def test_replay_gives_the_intervals_verify_judged_at_each_look() -> None:
    verdict, measurements, baseline = recorded_run(random.Random(7))
    [one, four] = replay(verdict, measurements, planned_n=32, baseline=baseline)
    assert (one["planned"], one["requests"], four["requests"], four["stopped_early"]) == (32, 32, 14, True)
    assert [g["name"] for g in one["gates"]] == ["accept_length", "speedup"]
    looks = four["gates"][0]["looks"]
    assert [look["n"] for look in looks] == list(range(stats.MIN_SAMPLES, 15))
    m = baseline_from_dict(measurements)[4]
    level = point_level(2)
    for look in (looks[0], looks[-1]):
        prefix = Measurement(m.generations[: look["n"]], m.wall_s)
        again = gates.accept_length(prefix, sequential=True, planned_n=32, level=level)
        assert again is not None and (look["low"], look["high"]) == (again.low, again.high)
    # the sequence narrows as requests come in, around the same estimate
    assert looks[-1]["high"] - looks[-1]["low"] < looks[0]["high"] - looks[0]["low"]
    assert one["gates"][1]["threshold"] == 1.3 and one["gates"][1]["looks"][-1]["estimate"] > 1.0


def test_replay_without_gates_still_gives_accept_length_and_without_requests_nothing() -> None:
    rng = random.Random(3)
    verdict = {"points": [{"concurrency": 1, "gates": [], "summary": {}, "stopped_early": False}]}
    measurements = {"points": [{"concurrency": 1, "wall_s": 1.0, "requests": requests(rng, 10, 3.0)}]}
    [point] = replay(verdict, measurements)
    assert point["planned"] == 10 and [(g["name"], g["threshold"]) for g in point["gates"]] == [("accept_length", None)]
    assert replay(verdict, {}) == [] and replay({"points": []}, measurements) == []


def test_the_verify_sequence_shows_the_band_the_gate_and_the_verdict() -> None:
    verdict, measurements, baseline = recorded_run(random.Random(7))
    fig = plots.sequence_figure(replay(verdict, measurements, planned_n=32, baseline=baseline), title="verify: h0")
    assert fig.get_suptitle() == "verify: h0" and len(fig.axes) == 4  # two gates by two points
    accept1, accept4, speed1, _ = fig.axes
    for ax in fig.axes:
        assert ax.get_xlabel() == "requests measured" and ax.get_title()
        assert any(isinstance(c, PolyCollection) for c in ax.collections)
        assert error_bars(ax)  # the interval the verdict recorded, at the last request
    assert accept1.get_ylabel() == "accept length (tokens per verify step)"
    assert speed1.get_ylabel() == "speedup (x baseline output throughput)"
    level = f"{point_level(2):.3g}"
    assert legend(accept1) == [
        "running estimate",
        f"confidence sequence ({level})",
        "gate >= 3",
        "planned: 32",
        "verdict (fixed-sample interval)",
    ]
    assert legend(accept4)[-1] == "verdict (stopped early)" and legend(speed1)[2] == "gate >= 1.3"
    assert horizontal_at(accept1, 3.0) and horizontal_at(speed1, 1.3)


def trend_points() -> list[dict[str, Any]]:
    return [
        {
            "run": f"20261201T1{i}0000Z-00000{i}",
            "at": f"2026-12-01T1{i}:00:00Z",
            "version": i + 1,
            "accept_length": 3.2 + 0.05 * i,
            "output_tokens_per_s": 180.0 + i,
            "speedup": 1.7 if i else None,
            "intervals": {"accept_length": iv(3.2 + 0.05 * i, 0.1), "output_tokens_per_s": iv(180.0 + i, 6.0)}
            | ({"speedup": iv(1.7, 0.15)} if i else {}),
            "gates": {"accept_length": 3.0, "speedup": 1.3},
        }
        for i in range(3)
    ]


def test_the_trend_shows_each_run_with_its_interval_and_gate() -> None:
    fig = plots.trend_figure("tiny", trend_points())
    accept, tput, speedup = fig.axes
    assert "tiny" in fig.get_suptitle()
    assert accept.get_ylabel() == "accept length (tokens per verify step)"
    assert tput.get_ylabel() == "output throughput (tok/s)"
    assert speedup.get_ylabel() == "speedup (x baseline output throughput)"
    for ax in fig.axes:
        assert ax.get_xlabel() == "run, oldest first (profile version, start time UTC)" and ax.get_title()
        assert error_bars(ax)
    assert [t.get_text() for t in accept.get_xticklabels()][0] == "v1\n12-01 10:00"
    assert legend(accept) == ["gate", "measured, with interval"]
    assert legend(speedup) == ["gate", "baseline = 1.0x", "measured, with interval"]


def test_a_trend_without_intervals_shows_estimates_as_such() -> None:
    points = [{**p, "intervals": {}, "gates": {}} for p in trend_points()]
    accept = plots.trend_figure("tiny", points).axes[0]
    assert legend(accept) == ["measured, no interval (too few requests)"] and not error_bars(accept)


def tune_data() -> dict[str, Any]:
    candidates = []
    for steps in (1, 3, 5):
        for topk in (1, 2, 4):
            if (steps, topk) == (1, 4):
                continue  # dropped from the grid
            failed = "out of memory" if (steps, topk) == (5, 4) else None
            value = None if failed else 700.0 + 30 * steps - 10 * topk
            candidates.append(
                {
                    "key": f"steps={steps},topk={topk}",
                    "incumbent": (steps, topk) == (3, 1),
                    "speculative": {"num_steps": steps, "eagle_topk": topk},
                    "estimate": value,
                    "interval": iv(value, 12.0, "sequential") if value else None,
                    "requests": 32,
                    "eliminated": (steps, topk) not in ((5, 1), (3, 1)) and not failed,
                    "failed": failed,
                    "winner": (steps, topk) == (5, 1),
                }
            )
    return {
        "run": "20261201T100000Z-abcdef",
        "host": "h0",
        "profile": "tiny",
        "version": 2,
        "objective": {"metric": "output_tokens_per_s", "concurrency": 16},
        "requests": 180,
        "exhaustive_requests": 256,
        "level_note": "every interval at 0.9938 (Bonferroni over 8 candidates)",
        "candidates": candidates,
        "heat_map": heat_map(candidates),
    }


def test_the_heat_map_has_its_knobs_its_colour_scale_and_each_candidates_outcome() -> None:
    fig = plots.heat_map_figure(tune_data())
    ax, bar = fig.axes
    assert "heat map" in fig.get_suptitle() and ax.get_title()
    assert ax.get_xlabel() == "eagle_topk (branches per draft step)"
    assert ax.get_ylabel() == "num_steps (draft steps per verify)"
    assert bar.get_ylabel() == "output throughput (tok/s) at concurrency 16"
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "2", "4"]
    assert legend(ax) == ["winner", "eliminated", "current settings", "not measured", "failed"]
    texts = [t.get_text() for t in ax.texts]
    assert "840\n[828, 852]" in texts  # the winner's cell: its estimate and interval
    assert texts.count("not measured") == 1 and texts.count("failed") == 1
    assert ax.get_images()


def windows() -> list[dict[str, Any]]:
    rows = []
    states = [("ok", 3.5), ("ok", 3.45), ("unknown", None), ("degraded", 1.9), ("ok", 3.4)]
    for i, (state, estimate) in enumerate(states):
        rows.append(
            {
                "run_id": "20261203T100000Z-aaaaaa",
                "host": "h0",
                "release": "r1" if i < 4 else "r2",
                "profile": "tiny",
                "started_at": f"2026-12-03T10:{i:02d}:00Z",
                "ended_at": f"2026-12-03T10:{i:02d}:50Z",
                "state": state,
                "look": i,
                "estimate": estimate,
                "low": estimate - 0.2 if estimate else None,
                "high": estimate + 0.2 if estimate else None,
                "floor": 3.1,
                "method": "counters",
                "requests": 20,
                "action": None,
                "detail": {"expected": {"gate": 3.0, "verified_low": 3.4, "tolerance": 0.3}},
            }
        )
    return rows


def test_watch_shows_windows_against_the_floor_and_marks_the_degraded() -> None:
    fig = plots.watch_figure(windows(), title="watch: tiny on h0")
    [ax] = fig.axes
    assert fig.get_suptitle() == "watch: tiny on h0"
    assert ax.get_xlabel() == "time (UTC)" and ax.get_ylabel() == "accept length (tokens per verify step)"
    labels = legend(ax)
    for label in (
        "floor (r1)",
        "verified lower bound (r1)",
        "gate (r1)",
        "window not judged",
        "degraded window",
        "release r1, with interval",
        "degraded (r1), with interval",
        "release r2, with interval",
    ):
        assert label in labels, labels
    assert len(error_bars(ax)) == 3
    floor = next(line for line in ax.get_lines() if line.get_label() == "floor (r1)")
    assert set(floor.get_ydata()) == {3.1}  # type: ignore[arg-type]


def test_svg_is_text_and_the_same_for_the_same_data() -> None:
    first = plots.svg(plots.trend_figure("tiny", trend_points()))
    assert first.startswith("<svg") and "accept length (tokens per verify step)" in first
    assert first == plots.svg(plots.trend_figure("tiny", trend_points()))
    assert "<dc:date>" not in first


def test_pages_embed_each_figure_as_inline_svg() -> None:
    page = pages.runs_page({"tiny": trend_points()}, windows=windows(), tunes=[tune_data()])
    assert page.startswith("<!doctype html>") and page.count("<svg") == 3  # trend, watch on h0, heat map
    assert "<script" not in page and "src=" not in page and 'href="http' not in page  # nothing to fetch
    for text in ("output throughput (tok/s)", "time (UTC)", "eagle_topk (branches per draft step)", "steps=5,topk=1"):
        assert text in page
    tune = pages.tune_page(tune_data())
    assert tune.count("<svg") == 1 and "[828, 852]" in tune


def test_a_chart_without_matplotlib_names_the_extra(monkeypatch: pytest.MonkeyPatch, cli: Any, tmp_path: Path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` raises ImportError
    with pytest.raises(InputError) as raised:
        plots.require()
    assert raised.value.fix == "pip install 'specctl[plots]'"
    result = cli("runs", "--plot-file", str(tmp_path / "r.html"), "--ledger", str(tmp_path / "ledger.db"))
    assert result.code == 2 and "pip install 'specctl[plots]'" in result.stderr
    assert not (tmp_path / "r.html").exists()


def test_show_and_runs_write_reports_of_a_recorded_deploy(
    cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fake_engine: Any
) -> None:
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # the local host's state root
    monkeypatch.setenv("SPECCTL_LEDGER", str(tmp_path / "ledger.db"))
    v1, _ = fast_inputs(tmp_path / "work", fake_engine, gates=True)
    v3 = write_profile(
        v1.parent / "tiny-llama-v3.yaml", v1.name, 3, verify={"concurrency": [1, 4], "min_speedup": 1.5, "requests": 12}
    )
    try:
        deployed = cli("--json", "deploy", str(v3), "--skip-check")
        assert deployed.code == 0, deployed.stdout + deployed.stderr
        [run] = [r["id"] for r in cli("--json", "runs").json()["runs"] if r["kind"] == "deploy"]
        page = tmp_path / "run.html"
        shown = cli("show", run, "--plot-file", str(page))
        assert shown.code == 0, shown.stdout + shown.stderr
        text = page.read_text()
        assert text.count("<svg") == 2  # the operating points, the verify sequence
        for label in (
            "concurrency (requests in flight)",
            "speedup (x baseline output throughput)",
            "baseline = 1.0x",
            "gate (min_speedup)",
            "requests measured",
            "accept length (tokens per verify step)",
            "confidence sequence",
        ):
            assert label in text, label
        assert "baseline (target alone), with interval" in text  # read back from the baseline run
        report = tmp_path / "runs.html"
        listed = cli("--json", "runs", "--plot-file", str(report))
        assert listed.code == 0 and listed.json()["report"] == str(report)
        assert "<svg" in report.read_text() and "output throughput (tok/s)" in report.read_text()
    finally:
        cli("stop", str(v3))
