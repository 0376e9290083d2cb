"""The CPU sglang environment the conformance tier runs real sglang code in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest


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
