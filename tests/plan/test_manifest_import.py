"""`manifest import`: ids plus a stated convention become canonical layers; ambiguity is refused."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

import pytest

from examples.hub import eagle3_tensors, write_checkpoint
from specctl.engines import get_engine
from specctl.errors import ManifestImportError
from specctl.plan.manifest_import import layers_from_ids
from specctl.profile import load_manifest
from tests.conftest import Serve
from tests.factory import DRAFTER_CONFIG, Scenario
from tests.hub_endpoint import HubRepo

COMMIT = hashlib.sha1(b"acme/drafter@1").hexdigest()


def test_conventions_to_canonical() -> None:
    assert layers_from_ids([1, 15, 28], "specforge", num_layers=32) == [1, 15, 28]
    assert layers_from_ids([0, 16, 29], "vllm", num_layers=32) == ["embedding", 15, 28]
    sglang = get_engine("sglang")
    assert layers_from_ids(
        [2, 30, 58],
        "sglang",
        num_layers=61,
        engine=sglang,
        engine_version="0.5.23",
        architecture="DeepseekV3ForCausalLM",
    ) == [1, 29, 57]
    assert layers_from_ids(
        [1, 29, 57],
        "sglang",
        num_layers=61,
        engine=sglang,
        engine_version="0.5.23",
        architecture="DeepseekV3ForCausalLM",
    ) == [1, 29, 57]
    with pytest.raises(ManifestImportError):
        layers_from_ids([-1, 2], "specforge", num_layers=32)


@pytest.fixture
def pair(tmp_path: Path) -> Scenario:
    s = Scenario(tmp_path)
    s.write()
    return s


def test_ambiguous_ids_are_refused_with_both_readings(cli: Any, pair: Scenario) -> None:
    result = cli("manifest", "import", str(pair.root / "drafter"), "--target", str(pair.root / "target"))
    assert result.code == 2
    text = " ".join(result.stderr.split())
    assert "ambiguous" in text and "as specforge ids: outputs of layers [1, 15, 28]" in text
    assert "as vllm ids: outputs of layers [0, 14, 27]" in text and "--convention" in text


def test_import_writes_a_manifest_that_loads(cli: Any, pair: Scenario, tmp_path: Path) -> None:
    out = tmp_path / "out" / "m.yaml"
    result = cli(
        "manifest",
        "import",
        str(pair.root / "drafter"),
        "--target",
        str(pair.root / "target"),
        "--convention",
        "specforge",
        "--out",
        str(out),
    )
    assert result.code == 0, result.stderr
    assert "deprecated" not in result.stderr
    manifest = load_manifest(out).model
    assert manifest.capture.layers == [1, 15, 28] and manifest.capture.width == 768
    assert manifest.target.num_hidden_layers == 32 and manifest.drafter.model == str(pair.root / "drafter")
    assert not list(out.parent.glob(".*.tmp"))


def test_training_state_run_config_decides(cli: Any, pair: Scenario, tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_text(json.dumps({"model": {"aux_hidden_state_layer_ids": [1, 15, 28]}, "tp_size": 4}))
    result = cli(
        "--json",
        "manifest",
        "import",
        str(pair.root / "drafter"),
        "--target",
        str(pair.root / "target"),
        "--training-state",
        str(run),
    )
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["capture"]["layers"] == [1, 15, 28] and data["training"]["tp"] == 4


def test_no_ids_needs_a_trainer_and_width_must_fit(cli: Any, tmp_path: Path) -> None:
    s = Scenario(tmp_path)
    del s.drafter_config["eagle_config"]
    s.write()
    assert cli("manifest", "import", str(tmp_path / "drafter"), "--target", str(tmp_path / "target")).code == 2
    data = cli(
        "--json",
        "manifest",
        "import",
        str(tmp_path / "drafter"),
        "--target",
        str(tmp_path / "target"),
        "--convention",
        "vllm",
    ).json()
    assert data["capture"]["layers"] == [1, 15, 28]
    config = {**DRAFTER_CONFIG}
    write_checkpoint(tmp_path / "d2", config, eagle3_tensors(config, 256, captures=2))
    result = cli(
        "manifest", "import", str(tmp_path / "d2"), "--target", str(tmp_path / "target"), "--convention", "specforge"
    )
    assert result.code == 2 and "fc.weight takes 512" in result.stderr


def test_unknown_convention_is_a_usage_error(cli: Any, pair: Scenario) -> None:
    result = cli(
        "manifest", "import", str(pair.root / "drafter"), "--target", str(pair.root / "target"), "--convention", "hf"
    )
    assert result.code == 2


def test_relative_paths_resolve_against_the_current_directory(
    cli: Any, pair: Scenario, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(pair.root)
    result = cli("--json", "manifest", "import", "drafter", "--target", "./target", "--convention", "specforge")
    assert result.code == 0, result.stderr
    data = result.json()
    assert data["drafter"]["model"] == str((pair.root / "drafter").resolve())
    assert data["target"]["model"] == str((pair.root / "target").resolve())


def test_a_repo_id_without_a_revision_is_an_input_error(cli: Any, pair: Scenario, serve: Serve) -> None:
    drafter = pair.root / "drafter"
    serve({"acme/drafter": HubRepo({p.name: p for p in drafter.iterdir()}, COMMIT)})
    result = cli(
        "manifest", "import", "acme/drafter", "--target", str(pair.root / "target"), "--convention", "specforge"
    )
    assert result.code == 2, result.stderr
    text = " ".join(result.stderr.split())
    assert "'acme/drafter' is a Hugging Face repo id without a pinned revision" in text
    assert "ORG/NAME@<40-hex commit>" in text and "{" not in text


def test_o_is_the_output_format_and_o_file_is_deprecated(cli: Any, pair: Scenario, tmp_path: Path) -> None:
    args = ("manifest", "import", str(pair.root / "drafter"), "--target", str(pair.root / "target"))
    as_json = cli(*args, "--convention", "specforge", "-o", "json")
    assert as_json.code == 0 and as_json.json()["capture"]["layers"] == [1, 15, 28]
    for flag in ("-o", "--output"):  # the old spelling writes the file for one more release, and says so
        out = tmp_path / f"{flag.strip('-')}.yaml"
        result = cli(*args, "--convention", "specforge", flag, str(out))
        assert result.code == 0, result.stderr
        note = " ".join(result.stderr.split())
        assert f"-o/--output FILE is deprecated and goes in the next release; use --out {out}" in note
        assert load_manifest(out).model.capture.layers == [1, 15, 28]
    both = cli(*args, "--convention", "specforge", "--out", str(tmp_path / "a.yaml"), "-o", str(tmp_path / "b.yaml"))
    assert both.code == 2 and "--out FILE only" in both.stderr
