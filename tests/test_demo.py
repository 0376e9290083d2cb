"""`specctl demo` end to end: real servers on this machine, real measurements, everything stopped after."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_demo_shows_speculation_and_the_wrong_layers(cli: Any, tmp_path: Path) -> None:
    port = free_port()
    result = cli("--json", "demo", "--workdir", str(tmp_path), "--port", str(port), "--requests", "6")
    assert result.code == 0, result.stderr
    data = result.json()
    runs = data["runs"]
    good, base, wrong = runs["v1: trained layers"], runs["baseline: no speculation"], runs["v2: wrong layers"]
    assert good["mean_accept_length"] >= 2.0 and base["mean_accept_length"] is None
    assert wrong["mean_accept_length"] <= 0.7 * good["mean_accept_length"]
    assert good["completion_tokens"] == base["completion_tokens"] == wrong["completion_tokens"]  # same greedy text
    assert not [f for f in data["checks"]["v1"] if f["severity"] == "error"]
    assert "capture-mismatch" in {f["code"] for f in data["checks"]["v2"]}
    with socket.socket() as s:  # nothing left listening
        assert s.connect_ex(("127.0.0.1", port)) != 0
    releases = list((tmp_path / "hosts" / "local" / "tiny-llama-demo" / "releases").iterdir())
    assert len(releases) == 2 and (tmp_path / "hosts" / "local" / "tiny-llama-demo" / "current").is_symlink()
    for release in releases:
        assert (release / "launch.sh").exists() and (release / "server.log").exists() and (release / "plan.json").exists()
