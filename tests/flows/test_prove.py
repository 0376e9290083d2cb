"""The proof command itself (flows/prove.py) on this machine: a launch script with its `exec` replaced,
the reference engine's parser, and what each check reads."""

from __future__ import annotations

import socket
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from specctl.engines import get_engine
from specctl.engines.base import Engine
from specctl.facts import host as host_facts
from specctl.flows import prove as proving
from specctl.hosts.local import local_transport

ENGINE = get_engine("reference")


def proved(
    tmp_path: Path,
    *words: str,
    python: str = sys.executable,
    reads: Sequence[str] = (),
    port: int | None = None,
    address: str = "",
    engine: Engine = ENGINE,
) -> proving.Proof:
    (tmp_path / "r").mkdir(exist_ok=True)
    launch = "#!/bin/sh\nset -eu\nexport SOME=1\nexec " + " ".join([python, "-m", "specctl.engines.reference", *words])
    return proving.run(
        local_transport(),
        engine,
        release_dir=str(tmp_path / "r"),
        root=str(tmp_path),
        pinned="",
        reads=reads,
        port=port,
        address=address,
        launch=launch + "\n",
    )


def checks(proof: proving.Proof, python: str = sys.executable) -> list[str]:
    return [p.check for p in proving.problems(proof, python=python, engine_name="reference")]


def test_a_launch_that_would_start_is_proven(tmp_path: Path) -> None:
    proof = proved(tmp_path, "--model-path", str(tmp_path), "--port", "31999")
    assert proof.done and proof.engine is not None and proof.engine["check"] is None, proof
    assert checks(proof) == [] and proof.room_kib and proof.room_kib > 0


def test_each_check_names_what_failed(tmp_path: Path) -> None:
    missing = proved(tmp_path, "--model-path", "/nonexistent/model", "--port", "31999", reads=["/nonexistent/model"])
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
        local_transport(),
        ENGINE,
        release_dir=str(tmp_path / "new"),
        root=str(tmp_path),
        pinned="",
        reads=[str(tmp_path), "${SPECCTL_RELEASE_DIR}/overlay"],
        launch=launch,
    )
    assert checks(proof) == [], proof


def test_what_the_command_prints_is_read() -> None:
    proof = proving.read(
        "h", "disk_free_kib=2048\ngpu_process=42 42 /usr/bin/python3\ngpu_process=7 - trainer\nengine_rc=124\n"
    )
    assert proof.room_kib == 2048 and proof.gpu_processes == [(42, 42, "/usr/bin/python3"), (7, None, "trainer")]
    assert proving.strangers_on_gpus(proof, {42}) == ["trainer (pid 7)"]
    [problem] = proving.problems(proof, python="py", engine_name="e", margin_mib=1)
    assert problem.check == "engine-import" and "ran past" in problem.message
    assert [p.check for p in proving.unset_secrets(["A", "B"], {"A": "x"})] == ["secret"]


def test_only_the_paths_the_engine_reads_are_asked(tmp_path: Path) -> None:
    """Before: every absolute word of the launch had to exist, so a flag naming a path the engine
    writes or only names (`--served-model-name /models/x`, `--log-dir=/...`) refused a valid launch."""
    proof = proved(
        tmp_path, "--model-path", str(tmp_path), "--served-model-name", "/models/x", "--port", "31999",
        reads=[str(tmp_path)],
    )  # fmt: skip
    assert checks(proof) == [] and proof.paths == [], proof
    missing = proved(tmp_path, "--model-path", str(tmp_path / "gone"), reads=[str(tmp_path / "gone")])
    [problem] = proving.problems(missing, python=sys.executable, engine_name="reference")
    assert problem.check == "launch-path" and str(tmp_path / "gone") in problem.message


def test_the_inputs_are_the_models_the_overlay_and_the_releases_files(tmp_path: Path, fake_engine: Any) -> None:
    from specctl.profile import load_profile
    from tests.fakes.inputs import fast_inputs

    v1, _ = fast_inputs(tmp_path, fake_engine, engine={"args": {"served-model-name": "/models/x"}})
    profile = load_profile(v1).model
    assert profile.drafter is not None
    plain = {"baseline": False, "overlay": None, "files": {}}
    assert proving.inputs(plain, profile) == [profile.target.model, profile.drafter.model]
    overlaid = {"baseline": False, "overlay": {"directory": "${SPECCTL_RELEASE_DIR}/overlay"}, "files": {"a.json": {}}}
    assert proving.inputs(overlaid, profile) == [
        profile.target.model,
        "${SPECCTL_RELEASE_DIR}/overlay",
        "${SPECCTL_RELEASE_DIR}/a.json",
    ]
    assert proving.inputs({"baseline": True, "overlay": None, "files": {}}, profile) == [profile.target.model]


class _Warns:
    """An engine whose proof answers, then warns on stderr (as an import's late warning does)."""

    def __init__(self, script: Path) -> None:
        self.script, self.name = script, "reference"

    def prove_script(self) -> Path:
        return self.script


def test_the_engines_stderr_is_kept_apart_from_its_answer(tmp_path: Path) -> None:
    """Before: stdout and stderr went through one `tail -n 3`: warnings after the answer pushed it out
    and the proof said the engine "gave no answer"."""
    script = tmp_path / "warns.py"
    script.write_text(
        "import json, sys\n"
        "print('loading', flush=True)\n"
        "print(json.dumps({'version': '1', 'check': None, 'error': None}), flush=True)\n"
        "for i in range(5):\n"
        "    print(f'UserWarning: something {i}', file=sys.stderr)\n"
    )
    engine: Any = _Warns(script)
    proof = proved(tmp_path, "--model-path", str(tmp_path), engine=engine)
    assert proof.engine == {"version": "1", "check": None, "error": None}, proof
    assert checks(proof) == []
    script.write_text("import sys\nprint('half a line')\nsys.stderr.write('ImportError: no module named x\\n')\n")
    silent = proved(tmp_path, "--model-path", str(tmp_path), engine=engine)
    [problem] = proving.problems(silent, python=sys.executable, engine_name="reference")
    assert problem.check == "engine-import" and "ImportError: no module named x" in problem.message, problem


@pytest.fixture
def taken() -> Iterator[int]:
    s = socket.socket()
    s.bind(("0.0.0.0", 0))
    s.listen(1)
    yield s.getsockname()[1]
    s.close()


def test_the_proof_tries_the_port_again(tmp_path: Path, taken: int) -> None:
    """A port taken after preflight (during a long stage) is found before anything stops."""
    proof = proved(tmp_path, "--model-path", str(tmp_path), port=taken)
    assert proof.port_free is False and proof.port_error == "EADDRINUSE", proof
    [problem] = proving.problems(proof, python=sys.executable, engine_name="reference", port=taken)
    assert problem.check == "port" and problem.message == f"port {taken} is in use on 0.0.0.0", problem
    assert proved(tmp_path, "--model-path", str(tmp_path), port=None).port_free is None  # ours hold it: not tried


@pytest.mark.parametrize(
    ("address", "cause", "said"),
    [
        ("203.0.113.7", "EADDRNOTAVAIL", "engine.host 203.0.113.7 is not an address of this host"),
        ("no-such-host.invalid", "EAI_", "engine.host no-such-host.invalid does not resolve on this host"),
    ],
)
def test_a_port_that_will_not_bind_says_why(tmp_path: Path, address: str, cause: str, said: str) -> None:
    """Before: every OSError was `port_free=no`, and preflight said the port was in use by a stranger."""
    facts = host_facts.gather(
        local_transport(), python=sys.executable, root=str(tmp_path), port=31999, distribution="x", address=address
    )
    assert facts.port_free is False and (facts.port_error or "").startswith(cause) and not facts.port_taken, facts
    assert host_facts.port_refusal(31999, address, facts.port_error)[0].startswith(said)
    proof = proved(tmp_path, "--model-path", str(tmp_path), port=31999, address=address)
    assert proof.port_free is False and proof.port_error == facts.port_error, proof


def test_a_taken_port_is_in_use(tmp_path: Path, taken: int) -> None:
    facts = host_facts.gather(
        local_transport(), python=sys.executable, root=str(tmp_path), port=taken, distribution="x"
    )
    assert facts.port_free is False and facts.port_error == "EADDRINUSE" and facts.port_taken
    assert "port_error" in facts.to_dict() and facts.disk_free_gib is not None
