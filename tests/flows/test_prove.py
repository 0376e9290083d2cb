"""The proof command itself (flows/prove.py) on this machine: a launch script with its `exec` replaced,
the reference engine's parser, and what each check reads."""

from __future__ import annotations

import sys
from pathlib import Path

from specctl.engines import get_engine
from specctl.flows import prove as proving
from specctl.hosts.local import local_transport

ENGINE = get_engine("reference")


def proved(tmp_path: Path, *words: str, python: str = sys.executable) -> proving.Proof:
    (tmp_path / "r").mkdir(exist_ok=True)
    launch = "#!/bin/sh\nset -eu\nexport SOME=1\nexec " + " ".join([python, "-m", "specctl.engines.reference", *words])
    return proving.run(
        local_transport(), ENGINE, release_dir=str(tmp_path / "r"), root=str(tmp_path), pinned="", launch=launch + "\n"
    )


def checks(proof: proving.Proof, python: str = sys.executable) -> list[str]:
    return [p.check for p in proving.problems(proof, python=python, engine_name="reference")]


def test_a_launch_that_would_start_is_proven(tmp_path: Path) -> None:
    proof = proved(tmp_path, "--model-path", str(tmp_path), "--port", "31999")
    assert proof.done and proof.engine is not None and proof.engine["check"] is None, proof
    assert checks(proof) == [] and proof.room_kib and proof.room_kib > 0


def test_each_check_names_what_failed(tmp_path: Path) -> None:
    missing = proved(tmp_path, "--model-path", "/nonexistent/model", "--port", "31999")
    assert checks(missing) == ["launch-path"] and missing.paths == ["/nonexistent/model"]
    refused = proved(tmp_path, "--model-path", str(tmp_path), "--no-such-flag")
    assert checks(refused) == ["engine-parse"]
    assert checks(proved(tmp_path, "--model-path", str(tmp_path), python="/nonexistent/python3")) == ["engine-python"]
    full = proved(tmp_path, "--model-path", str(tmp_path))
    assert [
        p.check for p in proving.problems(full, python=sys.executable, engine_name="reference", margin_mib=10**9)
    ] == ["root-room"]


def test_a_release_dir_not_yet_written_is_not_asked_about(tmp_path: Path) -> None:
    """A dry run: the overlay inside the release to be written does not exist yet, and is not a failure."""
    words = f'--model-path {tmp_path} --speculative-draft-model-path "$SPECCTL_RELEASE_DIR/overlay"'
    launch = f"#!/bin/sh\nexec {sys.executable} -m specctl.engines.reference {words}\n"
    proof = proving.run(
        local_transport(), ENGINE, release_dir=str(tmp_path / "new"), root=str(tmp_path), pinned="", launch=launch
    )
    assert checks(proof) == [], proof


def test_what_the_command_prints_is_read() -> None:
    proof = proving.read(
        "h", "room_kib=2048\ngpu_process=42 42 /usr/bin/python3\ngpu_process=7 - trainer\nengine_rc=124\n"
    )
    assert proof.room_kib == 2048 and proof.gpu_processes == [(42, 42, "/usr/bin/python3"), (7, None, "trainer")]
    assert proving.strangers_on_gpus(proof, {42}) == ["trainer (pid 7)"]
    [problem] = proving.problems(proof, python="py", engine_name="e", margin_mib=1)
    assert problem.check == "engine-import" and "ran past" in problem.message
    assert [p.check for p in proving.unset_secrets(["A", "B"], {"A": "x"})] == ["secret"]
