"""A profile's references to other files are checked as it loads: validate catches what a deploy would meet."""

from __future__ import annotations

import errno
import json
import os
from pathlib import Path
from typing import Any

import pytest

from specctl.errors import InputError
from specctl.profile import load_profile
from specctl.profile._files import MAX_WORKLOAD_BYTES, _os_refusal
from specctl.verdict.workload import load_workload, parse_workload
from tests.profile.test_document import GOOD, write
from tests.profile.test_hostile_input import one_problem

REQUEST = json.dumps({"messages": [{"role": "user", "content": "hi"}]}) + "\n"


def with_workload(tmp_path: Path, workload: str, name: str = "p.yaml") -> Path:
    return write(tmp_path, GOOD + f"verify:\n  workload: {workload}\n", name)


def make(tmp_path: Path, kind: str) -> str:
    """A workload path of each broken kind, relative to tmp_path where it can be."""
    if kind == "directory":
        (tmp_path / "prompts").mkdir()
        return "prompts"
    if kind == "binary":
        (tmp_path / "prompts.bin").write_bytes(bytes(range(256)) * 4)
        return "prompts.bin"
    if kind == "fifo":
        os.mkfifo(tmp_path / "prompts.fifo")
        return "prompts.fifo"
    if kind == "empty-messages":
        (tmp_path / "prompts.jsonl").write_text('{"messages": []}\n')
        return "prompts.jsonl"
    if kind == "deep":
        (tmp_path / "prompts.jsonl").write_text("[" * 100_000 + "]" * 100_000 + "\n")
        return "prompts.jsonl"
    return {"missing": "nope.jsonl", "passwd": "/etc/passwd", "zero": "/dev/zero"}[kind]


KINDS = ["directory", "binary", "fifo", "empty-messages", "deep", "missing", "passwd", "zero"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_workload_that_is_no_workload_fails_validate_at_the_field(cli: Any, tmp_path: Path, kind: str) -> None:
    path = with_workload(tmp_path, make(tmp_path, kind))
    p = one_problem(cli, "validate", str(path))
    assert (p["file"], p["line"], p["column"], p["field"]) == (str(path), 18, 3, "verify.workload"), p
    assert p["source_line"].startswith("  workload: ") and p["fix"]


@pytest.mark.parametrize("command", [("check",), ("render",), ("deploy", "--dry-run")])
def test_check_render_and_deploy_refuse_it_too(cli: Any, tmp_path: Path, command: tuple[str, ...]) -> None:
    path = with_workload(tmp_path, make(tmp_path, "directory"))
    assert one_problem(cli, *command, str(path))["field"] == "verify.workload"


def test_built_in_and_file_workloads_pass(tmp_path: Path) -> None:
    assert load_profile(with_workload(tmp_path, "chat-small")).model.verify.workload == "chat-small"
    (tmp_path / "mine.jsonl").write_text(REQUEST)
    assert load_profile(with_workload(tmp_path, "mine.jsonl")).model.verify.workload == "mine.jsonl"


def test_a_workload_is_relative_to_the_file_that_names_it(tmp_path: Path) -> None:
    (tmp_path / "base").mkdir()
    (tmp_path / "base" / "mine.jsonl").write_text(REQUEST)
    with_workload(tmp_path / "base", "mine.jsonl", "base.yaml")
    child = write(tmp_path, "apiVersion: specctl/v1\nkind: Profile\nextends: base/base.yaml\n", "child.yaml")
    assert load_profile(child).model.verify.workload == "mine.jsonl"


def test_check_files_off_loads_the_profile_alone(tmp_path: Path) -> None:
    path = with_workload(tmp_path, "nope.jsonl")
    assert load_profile(path, check_files=False).model.verify.workload == "nope.jsonl"


@pytest.mark.parametrize("kind", KINDS)
def test_load_workload_refuses_each_kind_as_bad_input(tmp_path: Path, kind: str) -> None:
    with pytest.raises(InputError):
        load_workload(make(tmp_path, kind), tmp_path)


def test_a_workload_over_the_size_limit_is_refused_unread(tmp_path: Path) -> None:
    path = tmp_path / "big.jsonl"
    with path.open("wb") as f:
        f.truncate(MAX_WORKLOAD_BYTES + 1)  # sparse: the size alone refuses it
    with pytest.raises(InputError, match="over the limit"):
        load_workload(str(path))


def test_parse_workload_keeps_line_numbers_and_bytes() -> None:
    raw = (REQUEST + "\n" + REQUEST).encode()
    workload = parse_workload("w", raw)
    assert len(workload.requests) == 2 and workload.raw == raw
    with pytest.raises(InputError, match="w:2: not a"):
        parse_workload("w", (REQUEST + "[1]\n").encode())
    with pytest.raises(InputError, match="not UTF-8"):
        parse_workload("w", b"\xff\n")


def test_a_name_that_only_looks_built_in_is_a_path(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="neither built in nor a file"):
        load_workload("../workloads/chat-small", tmp_path)


def test_permission_denied_reads_as_such() -> None:
    refusal = _os_refusal(PermissionError(errno.EACCES, "Permission denied"))
    assert refusal.message == "cannot be read: permission denied" and not refusal.missing
