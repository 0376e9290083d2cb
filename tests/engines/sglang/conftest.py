"""The CPU sglang environment the conformance tier runs real sglang code in."""

from __future__ import annotations

import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest

SCRIPTS = Path(__file__).resolve().parents[3] / "scripts"


@pytest.fixture(scope="module")
def sglang_python() -> str:
    """SPECCTL_SGLANG_PYTHON (`make test` sets it); a missing environment skips, or fails under CI=true."""
    python = os.environ.get("SPECCTL_SGLANG_PYTHON", "")
    if not python or not Path(python).exists():
        message = "SPECCTL_SGLANG_PYTHON does not name the sglang CPU environment (make sglang-env)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return python


def script(name: str) -> ModuleType:
    """A generator of scripts/ loaded as a module (it imports gen_sglang_conventions beside it)."""
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


@dataclass(frozen=True)
class Wheels:
    """The sglang wheels in the cache: every release, or on a fresh machine the conformance sample."""

    releases: list[str]
    conventions: ModuleType

    def wheel(self, version: str) -> Path:
        path: Path = self.conventions.cached_wheel(self.conventions.DEFAULT_CACHE, version)
        return path

    def newer(self, a: str, b: str) -> bool:
        """Whether release a is b or later."""
        return bool(self.conventions.version_key(a) >= self.conventions.version_key(b))


@pytest.fixture(scope="module")
def cached_wheels() -> Wheels:
    conventions = script("gen_sglang_conventions")
    releases = conventions.list_releases_cached(conventions.DEFAULT_CACHE)
    if not releases:
        if os.environ.get("CI") == "true":
            pytest.fail(f"no sglang wheels in {conventions.DEFAULT_CACHE}")
        pytest.skip(f"no sglang wheels in {conventions.DEFAULT_CACHE}")
    return Wheels(releases, conventions)
