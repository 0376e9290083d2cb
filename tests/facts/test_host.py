"""The host facts command (specctl/facts/host.py), run in the real `sh` with real interpreters: the
engine version it reads without importing importlib.metadata is the one importlib.metadata gives."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from specctl.facts import host
from specctl.hosts.transport import Completed


def facts(python: str, distribution: str, *, root: str = "/tmp", env: dict[str, str] | None = None) -> host.HostFacts:
    argv = host.command(python=python, root=root, port=1, distribution=distribution)
    done = subprocess.run(argv, capture_output=True, env=env, timeout=60)
    return host.read("h", 1, Completed(done.returncode, done.stdout, done.stderr.decode()))


@pytest.mark.parametrize("name", ["typer", "PyYAML", "pyyaml", "pydantic_core", "pydantic-core", "Jinja2"])
def test_the_version_is_what_importlib_metadata_says(name: str) -> None:
    got = facts(sys.executable, name)
    assert got.engine_version == version(name)
    assert got.python == ".".join(map(str, sys.version_info[:3]))


def test_a_distribution_not_installed_is_none() -> None:
    assert facts(sys.executable, "no-such-distribution-here").engine_version is None


def dist(site: Path, dirname: str, metadata: str) -> None:
    (site / dirname).mkdir(parents=True)
    (site / dirname / ("PKG-INFO" if dirname.endswith("egg-info") else "METADATA")).write_text(metadata)


def test_the_first_directory_on_the_path_wins_and_its_metadata_is_read_as_importlib_reads_it(
    tmp_path: Path,
) -> None:
    first, second = tmp_path / "first", tmp_path / "second"
    dist(first, "my_engine-2.0.dist-info", "Metadata-Version: 2.1\nName: my-engine\nVersion: 2.0\n")
    dist(second, "My.Engine-1.0.dist-info", "Metadata-Version: 2.1\nName: My.Engine\nVersion: 1.0\n")
    dist(second, "other-3.0-py3.11.egg-info", "Metadata-Version: 1.1\nName: other\nVersion: 3.0\n")
    dist(first, "later-1.0.dist-info", "Metadata-Version: 2.1\nName: later\n\nVersion: 9.9 (in the body)\n")
    dist(first, "both-1.0.egg-info", "Metadata-Version: 1.1\nName: both\nVersion: 1.0\n")
    dist(first, "both-2.0.dist-info", "Metadata-Version: 2.1\nName: both\nVersion: 2.0\n")
    dist(second, "both-3.0.dist-info", "Metadata-Version: 2.1\nName: both\nVersion: 3.0\n")
    dist(first, "dev.egg-info", "Metadata-Version: 1.1\nName: dev\nVersion: 0.1.dev0\n")
    dist(first, "dotted.name-1.0-py3.11.egg-info", "Metadata-Version: 1.1\nName: dotted.name\nVersion: 1.0\n")
    dist(second, "dotted_name-2.0.dist-info", "Metadata-Version: 2.1\nName: dotted_name\nVersion: 2.0\n")
    env = {"PYTHONPATH": f"{first}:{second}", "PATH": "/usr/bin:/bin"}
    for name in (
        "my-engine",
        "MY_ENGINE",
        "other",
        "later",
        "both",
        "dev",
        "dotted.name",
        "dotted_name",
        "Dotted-Name",
    ):
        expected = subprocess.run(
            [sys.executable, "-c", "import sys, importlib.metadata as m; print(m.version(sys.argv[1]))", name],
            capture_output=True, text=True, env=env, check=True,
        ).stdout.strip()  # fmt: skip
        # metadata without a version: importlib.metadata says None, the facts an unknown version
        assert facts(sys.executable, name, env=env).engine_version == (None if expected == "None" else expected), name
    assert facts(sys.executable, "my-engine", env=env).engine_version == "2.0"
