"""The CLI end to end on the shipped examples: exit codes, human output and --json."""

from __future__ import annotations

from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
KIMI = str(ROOT / "profiles" / "kimi-k2.5-tp8.yaml")
BROKEN = str(ROOT / "profiles" / "kimi-k2.5-tp8-broken.yaml")


def test_check_broken_kimi_names_the_mismatch_and_the_fix(cli: Any, hub_env: Path) -> None:
    result = cli("check", BROKEN)
    assert result.code == 1
    out = " ".join(result.stdout.split())
    assert "capture-mismatch" in out
    # sglang 0.5.23's DeepSeek forward preallocates a slot per requested position: -1 leaves one empty
    assert "ids [-1, 2, 30] make sglang 0.5.23 (KimiK25ForConditionalGeneration) fail at start-up" in out
    assert "trained on [2, 30, 58] (positions [3, 31, 59])" in out
    assert "remove drafter.layer_ids so specctl writes an overlay with ids [3, 31, 59]" in out
    assert "capture-out-of-range" in out and "position -1 matches no layer" in out and "captured 2 of 3" in out


def test_check_good_kimi_passes_with_the_overlay_explained(cli: Any, hub_env: Path) -> None:
    result = cli("check", KIMI)
    assert result.code == 0, result.stdout + result.stderr
    out = " ".join(result.stdout.split())
    assert "capture-overlay" in out and "capture the outputs of layers [1, 29, 57]" in out and "ids [3, 31, 59]" in out


def test_check_json(cli: Any, hub_env: Path) -> None:
    result = cli("--json", "check", BROKEN)
    assert result.code == 1
    data = result.json()
    assert data["ok"] is False
    [mismatch] = [f for f in data["findings"] if f["code"] == "capture-mismatch"]
    assert mismatch["severity"] == "error" and mismatch["values"]["needed_layers"] == [2, 30, 58]
    assert cli("check", "--json", KIMI).json()["ok"] is True


def test_every_example_but_the_broken_one_passes(cli: Any, hub_env: Path) -> None:
    for path in sorted((ROOT / "profiles").glob("*.yaml")):
        expected = 1 if "broken" in path.name else 0
        assert cli("check", str(path)).code == expected, path


def test_render_sh_and_json(cli: Any, hub_env: Path) -> None:
    sh = cli("render", KIMI)
    assert sh.code == 0 and sh.stdout.startswith("#!/bin/sh\n")
    assert '--speculative-draft-model-path "${SPECCTL_RELEASE_DIR}"/drafter-overlay' in sh.stdout
    data = cli("render", KIMI, "--format", "json").json()
    assert data["overlay"]["config"]["eagle_config"]["eagle_aux_hidden_state_layer_ids"] == [3, 31, 59]
    assert data["capture"]["layers"] == [2, 30, 58]


def test_render_refuses_a_failing_profile_unless_forced(cli: Any, hub_env: Path) -> None:
    refused = cli("render", BROKEN)
    assert refused.code == 1 and refused.stdout == "" and "capture-mismatch" in refused.stderr
    forced = cli("render", BROKEN, "--force")
    assert forced.code == 0 and "'--speculative-draft-model-path'" not in forced.stdout


def test_render_node_out_of_range(cli: Any, hub_env: Path) -> None:
    result = cli("render", KIMI, "--node", "3")
    assert result.code == 2 and "node 3 does not exist" in result.stderr


def test_validate(cli: Any, tmp_path: Path) -> None:
    files = [str(p) for p in sorted((ROOT / "profiles").glob("*.yaml")) + sorted((ROOT / "manifests").glob("*.yaml"))]
    assert cli("validate", *files).code == 0
    bad = tmp_path / "bad.yaml"
    text = (ROOT / "profiles" / "qwen3-8b-rtx.yaml").read_text().replace("gpus_per_node: 1", "gpus_per_nodes: 1")
    bad.write_text(text)
    hardware, typo = (text.splitlines().index(line) + 1 for line in ("hardware:", "  gpus_per_nodes: 1"))
    result = cli("validate", str(bad))
    assert result.code == 2
    assert (
        f"{bad}:{typo}:3: hardware.gpus_per_nodes: unknown key" in result.stderr
        and "did you mean 'gpus_per_node'" in result.stderr
    )
    data = cli("validate", "--json", str(bad)).json()
    assert data["ok"] is False and {(p["field"], p["line"]) for p in data["files"][0]["problems"]} == {
        ("hardware.gpus_per_node", hardware),
        ("hardware.gpus_per_nodes", typo),
    }


def test_missing_profile_is_bad_input(cli: Any, tmp_path: Path) -> None:
    result = cli("check", str(tmp_path / "nope.yaml"))
    assert result.code == 2 and "file not found" in result.stderr
    assert cli("--json", "check", str(tmp_path / "nope.yaml")).json()["error"]["exit_code"] == 2


def test_usage_errors_exit_2(cli: Any) -> None:
    assert cli("check").code == 2
    assert cli("render", KIMI, "--format", "yaml").code == 2


def test_a_start_up_failure_prints_the_log_lines_its_hint_names() -> None:
    import io

    from specctl.cli._errors import report
    from specctl.cli._output import Output
    from specctl.release.readiness import StartupFailed

    failure = StartupFailed(
        "h0: the server exited during start-up",
        host="h0",
        log=["loading", "ValueError: capture 9"],
        fix="read the server log lines shown with this error",
    )
    failure.add_note("undoing stop-previous failed: h0: cannot connect")
    err = io.StringIO()
    code = report(failure, Output(stdout=io.StringIO(), stderr=err, environ={"NO_COLOR": "1", "COLUMNS": "200"}))
    text = err.getvalue()
    assert code == 3
    assert "last lines of the server log" in text and "ValueError: capture 9" in text
    assert "undoing stop-previous failed" in text
