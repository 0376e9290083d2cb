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


def script(name: str) -> ModuleType:
    """A generator of scripts/ loaded as a module (it imports gen_sglang_conventions beside it)."""
    return script_at(SCRIPTS / f"{name}.py", name)


def script_at(path: Path, name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _wheels_module() -> ModuleType:
    return script_at(SCRIPTS / "sglang-cpu" / "wheels.py", "sglang_cpu_wheels")


def wheel_directory() -> Path:
    """Where `make sglang-wheels` put the release wheels (SPECCTL_SGLANG_WHEELS, else the repository's .cache)."""
    return Path(os.environ.get("SPECCTL_SGLANG_WHEELS") or SCRIPTS.parent / ".cache" / "sglang-wheels")


@dataclass(frozen=True)
class Wheels:
    """The sglang release wheels of scripts/sglang-cpu/wheels.lock, every one present."""

    directory: Path
    releases: list[str]
    conventions: ModuleType

    def wheel(self, version: str) -> Path:
        path: Path = self.conventions.cached_wheel(self.directory, version)
        return path

    def newer(self, a: str, b: str) -> bool:
        """Whether release a is b or later."""
        return bool(self.conventions.version_key(a) >= self.conventions.version_key(b))


def locked_wheels() -> Wheels:
    """The locked wheels; a missing one skips, or fails under CI=true (`make test` fetches them all)."""
    conventions = script("gen_sglang_conventions")
    directory = wheel_directory()
    locked = _wheels_module().read_lock()
    missing = [v for v, (name, _) in locked.items() if not (directory / name).is_file()]
    if missing:
        message = f"no wheel of sglang {', '.join(missing)} in {directory} (make sglang-wheels fetches them)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return Wheels(directory, sorted(locked, key=conventions.version_key), conventions)


@pytest.fixture(scope="module")
def cached_wheels() -> Wheels:
    return locked_wheels()
