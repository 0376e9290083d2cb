"""The JSON Schemas of the file formats: valid draft 2020-12, published as printed, naming keys as they are
written, accepting every example file (and a file with `extends:` that leaves fields to the other file)."""

from __future__ import annotations

import json
import os
import typing
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import typer
import yaml

from specctl.cli.app import build
from specctl.cli.schema_cmds import SchemaKind
from specctl.errors import DocumentError
from specctl.profile import validate_file
from specctl.profile.schema import DIALECT, SCHEMA_KINDS, json_schema

ROOT = Path(__file__).resolve().parents[2]
PUBLISHED = ROOT / "docs" / "schema"
NAMES = {kind: name for name, kind in SCHEMA_KINDS.items()}  # Profile -> profile
EXAMPLES = sorted(
    path
    for folder in ("profiles", "manifests", "examples")
    for pattern in ("*.yaml", "*.yml")
    for path in (ROOT / folder).rglob(pattern)
)
HEADER = "apiVersion: specctl/v1\nkind: {kind}\n"


def validator(name: str) -> jsonschema.Draft202012Validator:
    return jsonschema.Draft202012Validator(json_schema(name), format_checker=jsonschema.FormatChecker())


def as_json(text: str) -> Any:
    """A YAML document as an editor checks it: JSON's types (mapping keys and dates are text)."""
    return json.loads(json.dumps(yaml.safe_load(text), default=str))


def schema_errors(name: str, text: str) -> list[str]:
    return [error.message for error in validator(name).iter_errors(as_json(text))]


@pytest.mark.parametrize("name", list(SCHEMA_KINDS))
def test_the_command_prints_a_valid_json_schema_for_each_kind(cli: Any, name: str) -> None:
    result = cli("schema", name)
    assert result.code == 0 and result.stderr == ""
    schema = result.json()
    jsonschema.Draft202012Validator.check_schema(schema)
    assert schema["$schema"] == DIALECT and schema["title"] == SCHEMA_KINDS[name]
    # JSON is the command's only output: --json, before or after the command, changes nothing
    assert cli("--json", "schema", name).stdout == cli("schema", name, "--json").stdout == result.stdout


def test_an_unknown_kind_is_a_usage_error_that_names_the_kinds(cli: Any) -> None:
    result = cli("schema", "profiles")
    assert result.code == 2 and result.stdout == ""
    assert "'profiles' is not one of 'profile', 'manifest', 'inventory'" in result.stderr


@pytest.mark.parametrize("name", list(SCHEMA_KINDS))
def test_the_published_schema_is_what_the_command_prints(cli: Any, name: str) -> None:
    published = PUBLISHED / f"{name}.schema.json"
    assert published.read_text() == cli("schema", name).stdout, f"{published} is stale: run `make schema`"


def test_the_command_completes_the_kinds_and_knows_each() -> None:
    assert set(typing.get_args(SchemaKind)) == set(SCHEMA_KINDS)
    command = typer.main.get_command(build("schema")).commands["schema"]  # type: ignore[attr-defined]
    [kind] = [param for param in command.params if param.name == "kind"]
    ctx = command.make_context("schema", ["profile"], resilient_parsing=True)
    assert [c.value for c in kind.shell_complete(ctx, "")] == list(SCHEMA_KINDS)
    assert [c.value for c in kind.shell_complete(ctx, "in")] == ["inventory"]


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_example_file_names_its_schema_loads_and_validates_against_it(path: Path) -> None:
    kind, _ = validate_file(path)
    first = path.read_text().splitlines()[0]
    prefix = "# yaml-language-server: $schema="
    published = PUBLISHED / f"{NAMES[kind]}.schema.json"
    modeline = prefix + os.path.relpath(published, path.parent)
    assert first.startswith(prefix), f"{path}: make its first line `{modeline}`"
    assert (path.parent / first.removeprefix(prefix)).resolve() == published, f"{path}: write `{modeline}`"
    assert schema_errors(NAMES[kind], path.read_text()) == []


def test_the_examples_cover_profiles_and_manifests() -> None:
    assert {validate_file(path)[0] for path in EXAMPLES} >= {"Profile", "DrafterManifest"}


def test_the_packaged_manifest_of_the_reference_engine_validates() -> None:
    # installed with specctl, away from docs/: no modeline (scripts/train_reference_models.py writes it)
    [path] = (ROOT / "specctl" / "engines" / "reference" / "models").glob("*.manifest.yaml")
    assert schema_errors("manifest", path.read_text()) == []


def test_keys_are_named_as_written_and_fields_left_out_of_the_digest_are_there() -> None:
    schema = json_schema("profile")
    whole = schema["$defs"]["Profile"]
    assert "apiVersion" in whole["properties"] and "api_version" not in whole["properties"]
    assert whole["required"] == ["apiVersion", "kind", "metadata", "target", "hardware", "engine"]
    # how to search and how to watch are not what is served (not in the digest), yet users write them
    assert {"tune", "watch"} <= set(whole["properties"]) and {"tune", "watch"} <= set(schema["properties"])
    defs = schema["$defs"]
    assert defs["Metadata"]["properties"]["name"]["description"] == "profile name, used in release paths"
    assert "specctl watch" in defs["EngineSettings"]["properties"]["metrics"]["description"]
    assert "accept-length units" in defs["Watch"]["properties"]["tolerance"]["description"]
    assert "DrafterManifest" in defs["Drafter"]["properties"]["manifest"]["description"]
    assert "OUTPUT" in json_schema("manifest")["$defs"]["Capture"]["properties"]["layers"]["description"]


def test_a_file_with_extends_may_leave_out_what_the_other_file_gives(tmp_path: Path) -> None:
    from specctl.profile import load_profile

    base = (ROOT / "profiles" / "kimi-k2.5-tp8.yaml").read_text()
    (tmp_path / "base.yaml").write_text(base.replace("../manifests/", str(ROOT / "manifests") + "/"))
    child = HEADER.format(kind="Profile") + "extends: base.yaml\nmetadata:\n  version: 4\ntune:\n  num_steps: [2]\n"
    (tmp_path / "child.yaml").write_text(child)
    loaded = load_profile(tmp_path / "child.yaml", check_files=False).model
    assert loaded.metadata.version == 4 and loaded.tune is not None
    assert schema_errors("profile", child) == []
    # without extends the same file lacks what a profile needs, however deep
    alone = schema_errors("profile", child.replace("extends: base.yaml\n", ""))
    assert "'name' is a required property" in alone and "'target' is a required property" in alone
    # and with it, what is written is still checked
    assert schema_errors("profile", child + "speculative:\n  num_step: 3\n") == [
        "Additional properties are not allowed ('num_step' was unexpected)"
    ]
    assert schema_errors("profile", "kind: Profile\nextends: base.yaml\n") == ["'apiVersion' is a required property"]


SLURM = "clusters:\n  gpu-farm:\n    kind: slurm\n    login: local\n    root: /shared/specctl\n"


@pytest.mark.parametrize(
    ("body", "valid"),
    [
        ("hosts:\n  node-0:\n    ssh: node-0\n    gpus: 8\ngroups:\n  all: [node-0]\n", True),
        (SLURM + "  k8s:\n    kind: kubernetes\n    namespace: serving\n", True),
        ("hosts:\n  Node 0:\n    ssh: node-0\n", False),  # not a plain name
        (SLURM.replace("    root: /shared/specctl\n", ""), False),  # a Slurm cluster needs its shared root
        (SLURM.replace("slurm", "kubernetes"), False),  # login and root are not Kubernetes keys
        ("hosts:\n  node-0:\n    ssh: {hostname: n0, port: 0}\n", False),
    ],
)
def test_the_inventory_schema_agrees_with_the_loader(tmp_path: Path, body: str, valid: bool) -> None:
    text = HEADER.format(kind="Inventory") + body
    (tmp_path / "hosts.yaml").write_text(text)
    try:
        validate_file(tmp_path / "hosts.yaml")
        loads = True
    except DocumentError:
        loads = False
    assert loads is valid and (schema_errors("inventory", text) == []) is valid


def test_an_inventory_with_extends_may_name_a_cluster_by_its_settings_alone() -> None:
    text = HEADER.format(kind="Inventory") + "extends: base.yaml\nclusters:\n  gpu-farm:\n    partition: h200\n"
    assert schema_errors("inventory", text) == []
    assert schema_errors("inventory", text.replace("extends: base.yaml\n", "")) != []
