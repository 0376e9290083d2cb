"""Settings built once from the environment: where specctl keeps its data."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from specctl.constants import APP_NAME


def data_dir(environ: Mapping[str, str] | None = None) -> Path:
    """`$XDG_DATA_HOME/specctl` (default `~/.local/share/specctl`)."""
    env = os.environ if environ is None else environ
    base = env.get("XDG_DATA_HOME") or str(Path.home() / ".local" / "share")
    return Path(base) / APP_NAME
