"""Profiles and manifests: strict schemas, positions in every error, extends overlays, stable digests."""

from __future__ import annotations

from pathlib import Path

import pytest

from specctl.errors import DocumentError
from specctl.profile import load_manifest, load_profile, validate_file

ROOT = Path(__file__).resolve().parents[2]

GOOD = """\
apiVersion: specctl/v1
kind: Profile
metadata:
  name: demo
  version: 1
target:
  model: /models/target
drafter:
  model: /models/drafter
  manifest: m.yaml
hardware:
  gpu: h100
  gpus_per_node: 8
engine:
  name: sglang
  version: "0.5.23"
"""


def write(tmp_path: Path, text: str, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def problems(path: Path) -> list:
    with pytest.raises(DocumentError) as info:
        load_profile(path)
    return info.value.problems


def test_good_profile_loads(tmp_path: Path) -> None:
    loaded = load_profile(write(tmp_path, GOOD))
    assert loaded.model.metadata.name == "demo"
    assert loaded.model.engine.port == 30000
    assert len(loaded.sha256) == 64


def test_unknown_key_names_line_column_and_suggests(tmp_path: Path) -> None:
    found = problems(write(tmp_path, GOOD.replace("  gpus_per_node: 8", "  gpus_per_nod: 8")))
    assert {p.field for p in found} == {"hardware.gpus_per_nod", "hardware.gpus_per_node"}
    [p] = [p for p in found if "unknown" in p.message]
    assert (p.line, p.column, p.field) == (13, 3, "hardware.gpus_per_nod")
    assert "unknown key" in p.message and "did you mean 'gpus_per_node'" in p.fix
    assert p.source_line == "  gpus_per_nod: 8"


def test_unknown_top_level_key_lists_allowed_keys_when_nothing_is_close(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD + "zzz: 1\n"))
    assert p.line == 17 and "allowed keys here" in p.fix and "speculative" in p.fix


def test_wrong_type_says_how_to_fix(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD.replace('version: "0.5.23"', "version: 0.5")))
    assert p.field == "engine.version" and p.line == 16 and "quote the value" in p.fix


def test_string_where_int_expected(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD.replace("version: 1", 'version: "1"')))
    assert p.field == "metadata.version" and "whole number" in p.message


def test_missing_required_field(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD.replace("  gpus_per_node: 8\n", "")))
    assert p.field == "hardware.gpus_per_node" and "missing" in p.message and p.line == 11


def test_unknown_gpu_suggests_catalog_key(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD.replace("gpu: h100", "gpu: rtx-pro-6000")))
    assert p.field == "hardware.gpu" and "rtx-pro-6000-blackwell" in p.fix


def test_unpinned_repo_revision_is_an_error_at_the_field(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD.replace("model: /models/target", "model: org/target")))
    assert p.field == "target.revision" and "allow_unpinned" in p.fix


def test_bad_yaml_points_at_the_syntax_error(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD.replace("  name: demo", "  name: [demo")))
    assert p.line is not None and "invalid YAML" in p.message


def test_duplicate_keys_are_errors(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD + "hardware:\n  gpu: b200\n"))
    assert "duplicate key" in p.message and p.line == 17


def test_wrong_kind_and_api_version(tmp_path: Path) -> None:
    [p] = problems(write(tmp_path, GOOD.replace("kind: Profile", "kind: DrafterManifest")))
    assert p.field == "kind"
    [p] = problems(write(tmp_path, GOOD.replace("specctl/v1", "specctl/v2")))
    assert p.field == "apiVersion" and p.line == 1


def test_secret_with_a_value_in_env_is_refused(tmp_path: Path) -> None:
    text = GOOD.replace('  version: "0.5.23"', '  version: "0.5.23"\n  env:\n    HF_TOKEN: x') + "secrets: [HF_TOKEN]\n"
    [p] = problems(write(tmp_path, text))
    assert p.field == "engine.env" and "secret" in p.message


def test_extends_merges_and_reports_positions_in_the_right_file(tmp_path: Path) -> None:
    write(tmp_path, GOOD, "base.yaml")
    child = write(
        tmp_path,
        "apiVersion: specctl/v1\nkind: Profile\nextends: base.yaml\nmetadata:\n  version: 2\nparallel:\n  tp: 0\n",
        "child.yaml",
    )
    [p] = problems(child)
    assert p.file == str(child) and p.line == 7 and p.field == "parallel.tp"
    fixed = write(
        tmp_path, "apiVersion: specctl/v1\nkind: Profile\nextends: base.yaml\nmetadata:\n  version: 2\n", "child2.yaml"
    )
    loaded = load_profile(fixed)
    assert loaded.model.metadata.name == "demo" and loaded.model.metadata.version == 2
    assert loaded.chain == (fixed, tmp_path / "base.yaml")
    bad = write(
        tmp_path, "apiVersion: specctl/v1\nkind: Profile\nextends: child3.yaml\nhardware:\n  gpu: nope\n", "child3.yaml"
    )
    [p] = problems(bad)
    assert "cycle" in p.message


def test_extends_error_in_base_names_the_base_file(tmp_path: Path) -> None:
    base = write(tmp_path, GOOD.replace("gpu: h100", "gpu: h1000"), "base.yaml")
    child = write(tmp_path, "apiVersion: specctl/v1\nkind: Profile\nextends: base.yaml\n", "child.yaml")
    [p] = problems(child)
    assert p.file == str(base) and p.line == 12


def test_sha256_is_stable_and_tracks_content(tmp_path: Path) -> None:
    a = load_profile(write(tmp_path, GOOD, "a.yaml")).sha256
    reordered = GOOD.replace("  name: demo\n  version: 1\n", "  version: 1\n  name: demo\n")
    assert load_profile(write(tmp_path, reordered, "b.yaml")).sha256 == a
    assert load_profile(write(tmp_path, GOOD.replace("version: 1", "version: 2"), "c.yaml")).sha256 != a


def test_manifest_width_must_match_layers(tmp_path: Path) -> None:
    text = (ROOT / "manifests" / "kimi-k25-eagle3.yaml").read_text().replace("width: 21504", "width: 14336")
    with pytest.raises(DocumentError) as info:
        load_manifest(write(tmp_path, text, "m.yaml"))
    [p] = info.value.problems
    assert p.field == "capture.width" and "21504" in p.fix


def test_manifest_layers_accept_embedding_and_reject_other_words(tmp_path: Path) -> None:
    text = (ROOT / "manifests" / "kimi-k25-eagle3.yaml").read_text()
    assert (
        load_manifest(
            write(tmp_path, text.replace("[2, 30, 58]", "[embedding, 30, 58]"), "a.yaml")
        ).model.capture.layers[0]
        == "embedding"
    )
    with pytest.raises(DocumentError):
        load_manifest(write(tmp_path, text.replace("[2, 30, 58]", "[embeding, 30, 58]"), "b.yaml"))


@pytest.mark.parametrize(
    "path",
    sorted((ROOT / "profiles").glob("*.yaml")) + sorted((ROOT / "manifests").glob("*.yaml")),
    ids=lambda p: p.name,
)
def test_shipped_examples_validate(path: Path) -> None:
    kind, sha = validate_file(path)
    assert kind in {"Profile", "DrafterManifest"} and len(sha) == 64


def test_operating_points_and_per_point_gates(tmp_path: Path) -> None:
    text = GOOD + "verify:\n  concurrency: [16, 1, 4]\n  min_speedup: {1: 1.3, 16: 1.0}\n  min_accept_length: 2.5\n"
    v = load_profile(write(tmp_path, text)).model.verify
    assert v.points == (1, 4, 16)
    assert [v.threshold("min_speedup", c) for c in v.points] == [1.3, None, 1.0]
    assert [v.threshold("min_accept_length", c) for c in v.points] == [2.5, 2.5, 2.5]
    # a release keeps the profile as JSON, where the keys are text: they read back the same
    from specctl.profile.profile import Profile

    loaded = load_profile(write(tmp_path, text)).model
    assert Profile.model_validate_json(loaded.model_dump_json(by_alias=True)).verify == v


def test_a_threshold_for_a_point_not_measured_names_the_field(tmp_path: Path) -> None:
    text = GOOD + "verify:\n  concurrency: [1, 4]\n  min_speedup: {1: 1.3, 16: 1.0}\n"
    [p] = problems(write(tmp_path, text))
    assert p.field == "verify.min_speedup" and "16" in p.message and p.line == 19
    [p] = problems(write(tmp_path, GOOD + "verify:\n  concurrency: [1, 1]\n"))
    assert p.field == "verify.concurrency"


def inventory_error(tmp_path: Path, text: str) -> DocumentError:
    from specctl.profile.document import load_document
    from specctl.profile.inventory import Inventory

    path = tmp_path / "hosts.yaml"
    path.write_text("apiVersion: specctl/v1\nkind: Inventory\n" + text)
    with pytest.raises(DocumentError) as caught:
        load_document(str(path), Inventory, "Inventory")
    return caught.value


@pytest.mark.parametrize(
    ("text", "said", "line"),
    [
        ("hosts:\n  h1:\n    hf_home: cache/hf\n", "hf_home 'cache/hf' is not an absolute path", 5),
        ("hosts:\n  h1:\n    python: venv/bin/python\n", "python 'venv/bin/python' is not an absolute path", 5),
        (
            'clusters:\n  c1:\n    kind: slurm\n    login: local\n    root: /shared\n    partition: "gpu\\nrm -rf ~"\n',
            "'gpu\\nrm -rf ~' holds a control character",
            8,
        ),
    ],
)
def test_remote_paths_and_script_values_are_refused_where_they_are_written(
    tmp_path: Path, text: str, said: str, line: int
) -> None:
    """A relative path on a host resolves against whatever directory a command starts in (an outage at
    launch), and a newline in a value that reaches a job script starts a command of its own."""
    [problem] = inventory_error(tmp_path, text).problems
    assert said in problem.message and problem.line == line and problem.fix


def test_a_command_on_path_and_home_paths_are_accepted(tmp_path: Path) -> None:
    from specctl.profile.document import load_document
    from specctl.profile.inventory import Inventory

    path = tmp_path / "hosts.yaml"
    path.write_text(
        "apiVersion: specctl/v1\nkind: Inventory\nhosts:\n  h1:\n    python: python3\n    hf_home: ~/hf\n"
        "  h2:\n    python: /opt/venv/bin/python\n    hf_home: /data/hf\n"
    )
    assert load_document(str(path), Inventory, "Inventory").model.hosts["h1"].python == "python3"
