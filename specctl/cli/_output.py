"""The one output sink: rich renderables for people, the same data as JSON under --json.

Data goes to stdout; hints, progress and errors to stderr, so stdout stays parseable. NO_COLOR wins.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import IO, Any

from rich.console import Console, RenderableType


@dataclass
class Output:
    """Where a command's results go; built once in the CLI callback and passed to commands."""

    json_mode: bool = False
    stdout: IO[str] = field(default_factory=lambda: sys.stdout)
    stderr: IO[str] = field(default_factory=lambda: sys.stderr)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def __post_init__(self) -> None:
        no_color = "NO_COLOR" in self.environ
        width = int(self.environ["COLUMNS"]) if self.environ.get("COLUMNS", "").isdigit() else None
        self.out = Console(file=self.stdout, no_color=no_color, highlight=False, width=width, soft_wrap=False)
        self.err = Console(file=self.stderr, no_color=no_color, highlight=False, width=width, soft_wrap=False)

    def result(self, data: Any, renderable: RenderableType | None = None) -> None:
        """The command's result: JSON under --json, otherwise the renderable (or the data as text)."""
        if self.json_mode:
            self.stdout.write(json.dumps(data, indent=2, sort_keys=True, default=str) + "\n")
        elif renderable is not None:
            self.out.print(renderable)
        else:
            self.stdout.write(str(data))

    def raw(self, text: str) -> None:
        """Exact text to stdout (a launch script): no markup, no wrapping."""
        self.stdout.write(text)

    def hint(self, renderable: RenderableType) -> None:
        """Something for people only: never part of --json output."""
        if not self.json_mode:
            self.err.print(renderable)
