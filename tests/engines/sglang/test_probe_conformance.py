"""The conformance tier: the probe runs real sglang 0.5.23 code on the CPU and must agree with
specctl's table, accept every command `render` produces, and reject what the catalog rejects.

Needs the `.venv-sglang` environment (`make sglang-env`), named by SPECCTL_SGLANG_PYTHON; with
CI=true a missing environment fails the run instead of skipping it.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import subprocess
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from specctl.engines import get_engine
from specctl.engines.sglang import capture as table
from specctl.flows import static
from specctl.flows.probe import run_probe
from specctl.plan.render import render_json
from tests.factory import Scenario, merge

pytestmark = pytest.mark.conformance
ROOT = Path(__file__).resolve().parents[3]
VERSION = "0.5.23"
LAYER_COUNTS = (32, 61, 94)
# check codes this file covers with a failing and a passing case (see tests/plan/test_checks.py)
COVERED = {"probe-version", "probe-disagrees", "probe-parse", "probe-agrees"}


_ASKED: dict[str, dict[str, Any]] = {}


@pytest.fixture(autouse=True)
def _each_question_probed_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """`check --engine-python` runs the probe, which imports sglang 0.5.23 afresh (8-12 s): a question
    this file already put to the same interpreter is answered as that probe answered it (two checks of
    the Kimi profile, the two versions of one profile). A different question is probed."""
    from specctl.flows import probe

    ask = probe.run_probe

    def asked(python: str, script: str, request: dict[str, Any], timeout_s: float = probe.PROBE_TIMEOUT_S) -> Any:
        key = json.dumps([python, script, request], sort_keys=True)
        if key not in _ASKED:
            answer = ask(python, script, request, timeout_s)
            if "error" in answer:
                return answer
            _ASKED[key] = answer
        return copy.deepcopy(_ASKED[key])

    monkeypatch.setattr(probe, "run_probe", asked)


def battery(n: int) -> list[list[int] | None]:
    """The issue's id lists: None, SpecForge defaults, -1 first, 0 first, the last layer; plus edge cases."""
    return [
        None,
        [1, n // 2 - 1, n - 4],
        [-1, n // 2, n - 4],
        [0, n // 2, n - 4],
        [1, n // 2, n - 1],
        [n - 1],
        [n],
        [2, n // 2, n - 3],
        [3, n // 2 + 1, n - 2],
        [n - 4, 1, n // 2],
        [1, 1, n // 2],
        [-2, 5],
    ]


def covered_architectures() -> list[str]:
    data = table.load_table()
    return [a for a in data.architectures() if (rule := data.rule_for(VERSION, a)) is not None and rule.supported]


@pytest.fixture(scope="module")
def answer(sglang_python: str) -> dict[str, Any]:
    """One probe run answering every architecture x layer count x id list (the imports happen once)."""
    jobs = [
        {"architecture": a, "num_layers": n, "queries": battery(n)}
        for a in covered_architectures()
        for n in LAYER_COUNTS
    ]
    result = run_probe(sglang_python, str(get_engine("sglang").probe_script()), {"captures": jobs})
    assert "error" not in result, result.get("error")
    assert result["version"] == VERSION
    return result


def report_for(answer: dict[str, Any], architecture: str, n: int) -> Any:
    return get_engine("sglang").probe_report("sglang-python", architecture, n, answer)


def test_probe_agrees_with_the_table_everywhere(answer: dict[str, Any]) -> None:
    assert len(answer["captures"]) == len(covered_architectures()) * len(LAYER_COUNTS) >= 30
    for job in answer["captures"]:
        assert job["supported"], job
        report = report_for(answer, job["architecture"], job["num_layers"])
        assert report.error is None
        assert report.disagreements == (), (job["architecture"], job["num_layers"], report.disagreements)
        rule = table.load_table().rule_for(VERSION, job["architecture"])
        assert rule is not None
        for result in job["results"]:
            expected = table.capture(rule, result["ids"], job["num_layers"])
            assert tuple(result["requested"] or ()) == expected.requested, (job["architecture"], result)


def test_kimi_truths(answer: dict[str, Any]) -> None:
    """ids [2, 30, 58] capture positions [2, 30, 58] (outputs of 1, 29, 57); the overlay's
    [3, 31, 59] capture [3, 31, 59]."""
    kimi = next(
        j
        for j in answer["captures"]
        if j["architecture"] == "KimiK25ForConditionalGeneration" and j["num_layers"] == 61
    )
    by_ids = {tuple(r["ids"]) if r["ids"] is not None else None: r for r in kimi["results"]}
    assert by_ids[(2, 30, 58)]["requested"] == [2, 30, 58]
    assert by_ids[(3, 31, 59)]["requested"] == [3, 31, 59]
    assert by_ids[(1, 29, 57)]["requested"] == [2, 30, 58]  # the +1 applies only when the first id is 1


def test_check_with_the_engine_names_the_kimi_mismatch_and_the_overlay_is_confirmed(
    sglang_python: str, hub_env: Path
) -> None:
    report = static.check(ROOT / "profiles" / "kimi-k2.5-tp8.yaml", offline=True, engine_python=sglang_python)
    codes = {f.code: f for f in report.findings}
    assert "probe-agrees" in codes and "probe-disagrees" not in codes
    overlay = codes["capture-overlay"]
    assert overlay.values["config_captured_layers"] == [1, 29, 57]  # ids [2, 30, 58] -> positions [2, 30, 58]
    assert overlay.values["ids"] == [3, 31, 59] and overlay.values["captured_positions"] == [3, 31, 59]
    assert report.inputs.probe is not None and report.inputs.probe.version == VERSION
    assert "probe" in (report.inputs.convention.source if report.inputs.convention else "")
    broken = static.check(ROOT / "profiles" / "kimi-k2.5-tp8-broken.yaml", offline=True, engine_python=sglang_python)
    mismatch = next(f for f in broken.findings if f.code == "capture-mismatch")
    # the seed's [-1, 2, 30]: position -1 leaves one of the packer's three slots empty, so 0.5.23 fails at start-up
    assert mismatch.values["captured_positions"] == [] and mismatch.values["needed_positions"] == [3, 31, 59]
    crash = next(f for f in broken.findings if f.code == "capture-out-of-range" and "error" in f.values)
    assert "captured 2 of 3 aux hidden states" in crash.values["error"]


def _argvs(profile: Path) -> list[Sequence[str]]:
    report = static.check(profile, offline=True)
    argvs: list[Sequence[str]] = []
    for baseline in (False, True):
        argvs += [node.argv for node in static.plan(report, baseline=baseline).nodes]
    return argvs


def test_every_rendered_command_parses_with_the_real_parser(sglang_python: str, hub_env: Path, tmp_path: Path) -> None:
    engine = get_engine("sglang")
    argvs: list[Sequence[str]] = []
    for profile in sorted((ROOT / "profiles").glob("*.yaml")):
        argvs += _argvs(profile)
    s = Scenario(tmp_path)  # a multi-node profile too
    s.profile = merge(
        s.profile, {"parallel": {"tp": 8, "nnodes": 2}, "hardware": {"gpus_per_node": 4}, "hosts": ["n0", "n1"]}
    )
    argvs += _argvs(s.write())
    answer = run_probe(sglang_python, str(engine.probe_script()), engine.probe_request(None, None, [], None, argvs))
    assert len(answer["parse"]) == len(argvs) >= 10
    for item in answer["parse"]:
        assert item["ok"], item


BAD_FLAGS = [
    ({"cuda-graph-max-bs": 8}, "unknown"),  # ambiguous prefix in 0.5.23: split into -decode/-prefill
    ({"speculative-draft": "x"}, "unknown"),
    ({"max-running-requests": "many"}, "type"),
    ({"mem-fraction-static": "most"}, "type"),
    ({"attention-backend": "flashinfr"}, "choice"),
    ({"tokenizer-mode": "fast"}, "choice"),
]


def test_bad_flags_are_rejected_by_catalog_and_real_parser(sglang_python: str, tmp_path: Path) -> None:
    engine = get_engine("sglang")
    argvs = []
    for i, (args, kind) in enumerate(BAD_FLAGS):
        s = Scenario(tmp_path / str(i))
        s.profile = merge(s.profile, {"engine": {"args": args}})
        report = static.check(s.write())
        assert f"flag-{kind}" in {f.code for f in report.findings}, args  # specctl's catalog says no
        argvs.append(static.plan(report).nodes[0].argv)
    answer = run_probe(sglang_python, str(engine.probe_script()), engine.probe_request(None, None, [], None, argvs))
    for (args, _), item in zip(BAD_FLAGS, answer["parse"], strict=True):
        assert not item["ok"] and item["error"], (args, item)  # and so does the engine's own parser
    # the same through `check --engine-python`: its own finding
    s = Scenario(tmp_path / "check")
    s.profile = merge(s.profile, {"engine": {"args": BAD_FLAGS[0][0]}})
    codes = {f.code for f in static.check(s.write(), engine_python=sglang_python).findings}
    assert {"flag-unknown", "probe-parse"} <= codes and "probe-agrees" not in codes


def test_good_flags_pass_both(sglang_python: str, tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.profile = merge(
        s.profile,
        {
            "engine": {
                "args": {
                    "cuda-graph-max-bs-decode": 8,
                    "attention-backend": "flashinfer",
                    "enable-metrics": True,
                    "context-length": "128k",
                }
            }
        },
    )
    report = static.check(s.write(), engine_python=sglang_python)
    codes = {f.code for f in report.findings}
    assert not {c for c in codes if c.startswith("flag-")} and "probe-parse" not in codes and "probe-agrees" in codes


def test_engine_version_mismatch_is_an_error(sglang_python: str, tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    s.profile = merge(s.profile, {"engine": {"version": "0.5.22"}})
    codes = {f.code for f in static.check(s.write(), engine_python=sglang_python).findings}
    assert "probe-version" in codes and "probe-agrees" not in codes
    s.profile = merge(s.profile, {"engine": {"version": VERSION}})
    assert "probe-version" not in {f.code for f in static.check(s.write(), engine_python=sglang_python).findings}


def test_a_wrong_table_row_is_caught(
    answer: dict[str, Any], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, sglang_python: str
) -> None:
    real = table.load_table()

    def tampered() -> table.ConventionTable:
        rows = [
            dataclasses.replace(r, explicit="plus_one")
            if r.architecture == "DeepseekV3ForCausalLM" and r.explicit == "plus_one_if_first_is_one"
            else r
            for r in real.rows
        ]
        return table.ConventionTable(real.releases, rows)

    assert report_for(answer, "DeepseekV3ForCausalLM", 61).disagreements == ()
    monkeypatch.setattr(table, "load_table", tampered)
    report = report_for(answer, "DeepseekV3ForCausalLM", 61)
    assert report.disagreements, "the tampered +1 rule should disagree with the real deepseek_v2 code"
    wrong = {d.ids: d for d in report.disagreements}
    assert wrong[(2, 30, 58)].table == (3, 31, 59) and wrong[(2, 30, 58)].engine == (2, 30, 58)
    # and `check` reports it as its own finding
    s = Scenario(tmp_path)
    s.target_config["architectures"] = ["DeepseekV3ForCausalLM"]
    s.manifest["target"]["architecture"] = "DeepseekV3ForCausalLM"
    findings = static.check(s.write(), engine_python=sglang_python).findings
    assert any(f.code == "probe-disagrees" for f in findings)


def test_render_is_unchanged_by_probing_when_engine_and_table_agree(sglang_python: str, hub_env: Path) -> None:
    path = ROOT / "profiles" / "kimi-k2.5-tp8.yaml"
    assert render_json(static.plan(static.check(path, offline=True))) == render_json(
        static.plan(static.check(path, offline=True, engine_python=sglang_python))
    )


def test_the_real_packer_fails_when_a_slot_stays_empty(sglang_python: str) -> None:
    """Executed, not read: sglang 0.5.23's own AuxHiddenStatePacker, sized for three requested
    positions and given two captures (what a position matching no layer, or a duplicate, leaves),
    raises at finalize(); the table's packer rows say the same for the seed's ids."""
    script = (
        "import torch\nfrom sglang.srt.layers.aux_hidden_states import AuxHiddenStatePacker as P\n"
        "p = P(3)\nfor _ in range(2):\n    p.capture(torch.zeros(4, 8))\ntry:\n    p.finalize()\n"
        "except Exception as exc:\n    print(type(exc).__name__, exc)\nelse:\n    print('filled')\n"
    )
    done = subprocess.run([sglang_python, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.strip() == "RuntimeError captured 2 of 3 aux hidden states", done.stderr[-500:]
    rule = table.load_table().rule_for(VERSION, "KimiK25ForConditionalGeneration")
    assert rule is not None
    predicted = table.capture(rule, [-1, 2, 30], 61).error
    assert predicted is not None and "captured 2 of 3 aux hidden states" in predicted


def test_prove_runs_sglangs_own_parser_and_pins_its_version(sglang_python: str, tmp_path: Path) -> None:
    """A deploy's `prove` (flows/prove.py) on real sglang: the launch script with its `exec` replaced,
    the version pinned and the flags through sglang's own parser; each failure named by its check."""
    from specctl.flows import prove as proving
    from specctl.hosts.local import local_transport

    engine = get_engine("sglang")

    def proved(pinned: str, *flags: str) -> proving.Proof:
        argv = f"{sglang_python} -m sglang.launch_server --model-path {tmp_path} {' '.join(flags)}"
        launch = f"#!/bin/sh\nset -eu\nexec {argv}\n"
        return proving.run(
            local_transport(), engine, release_dir=str(tmp_path / "r"), root=str(tmp_path), pinned=pinned, launch=launch
        )

    good = proved(VERSION, "--port", "31999")
    assert good.engine == {"version": VERSION, "check": None, "error": None}, good
    assert proving.problems(good, python=sglang_python, engine_name="sglang") == []
    refused = proved(VERSION, "--no-such-flag", "1")
    [problem] = proving.problems(refused, python=sglang_python, engine_name="sglang")
    assert problem.check == "engine-parse" and "--no-such-flag" in problem.message
    other = proved("0.0.1")
    assert [p.check for p in proving.problems(other, python=sglang_python, engine_name="sglang")] == ["engine-version"]
