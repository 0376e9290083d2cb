"""The one output sink: rich renderables for people, the same data as JSON under --json.

Data goes to stdout; hints, progress and errors to stderr, so stdout stays parseable. NO_COLOR wins.

JSON is strict JSON (RFC 8259): never NaN or Infinity, which Python's json writes by default and most
readers refuse. A value that is not finite is written null, and the object says where and what it was
(`not_finite`). Once a command has streamed JSON lines, everything else it prints on stdout, its
result or its error, is one more line: a reader of the stream reads lines to the end.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console, RenderableType

if TYPE_CHECKING:
    from rich.table import Table


@dataclass
class Output:
    """Where a command's results go; built once in the CLI callback and passed to commands."""

    json_mode: bool = False
    stdout: IO[str] = field(default_factory=lambda: sys.stdout)
    stderr: IO[str] = field(default_factory=lambda: sys.stderr)
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)

    def __post_init__(self) -> None:
        self.streamed = False  # a JSON line was streamed: what follows on stdout is one line too
        width = int(self.environ["COLUMNS"]) if self.environ.get("COLUMNS", "").isdigit() else None
        self.out = self._console(self.stdout, width)
        self.err = self._console(self.stderr, width)

    def _console(self, file: IO[str], width: int | None) -> Console:
        return Console(file=file, no_color="NO_COLOR" in self.environ, highlight=False, width=width, soft_wrap=False)

    def result(self, data: Any, renderable: RenderableType | None = None, *, fit: bool = True) -> None:
        """The command's result: JSON under --json, otherwise the renderable (or the data as text).
        `fit=False` prints the renderable at its natural width, past the terminal's (`-o wide`):
        long lines rather than cells folded into a narrow column."""
        if self.json_mode:
            self.stdout.write(dumps(data, indent=None if self.streamed else 2) + "\n")
            self.stdout.flush()
        elif renderable is not None and not fit:
            natural = self.out.measure(renderable, options=self.out.options.update_width(1 << 16)).maximum
            self._console(self.stdout, max(natural, self.out.width)).print(renderable)
        elif renderable is not None:
            self.out.print(renderable)
        else:
            self.stdout.write(str(data))

    def stream(self, data: Mapping[str, Any], text: str) -> None:
        """One record of a stream (`logs`): a JSON object on one line under --json, else the text;
        flushed at once, so a follower sees it as it comes."""
        if self.json_mode:
            self.streamed = True
        self.stdout.write((dumps(data) if self.json_mode else text) + "\n")
        self.stdout.flush()

    def raw(self, text: str) -> None:
        """Exact text to stdout (a launch script): no markup, no wrapping."""
        self.stdout.write(text)

    def hint(self, renderable: RenderableType) -> None:
        """Something for people only: never part of --json output."""
        if not self.json_mode:
            self.err.print(renderable)


def dumps(data: Any, *, indent: int | None = None) -> str:
    """`data` as strict JSON (one line without `indent`): a NaN or ±Infinity becomes null, and a dict
    at the top gains `not_finite`, each such value's path and what it was ("NaN", "Infinity",
    "-Infinity"). `allow_nan=False`: a value that slipped past is an error here, never a `NaN` token."""
    found: dict[str, str] = {}
    clean = _finite(data, "", found)
    if found and isinstance(clean, dict):
        clean = {**clean, "not_finite": found}
    return json.dumps(clean, indent=indent, sort_keys=True, default=str, allow_nan=False)


def _finite(value: Any, path: str, found: dict[str, str]) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        found[path or "."] = "NaN" if math.isnan(value) else ("Infinity" if value > 0 else "-Infinity")
        return None
    if isinstance(value, Mapping):
        return {k: _finite(v, f"{path}.{k}" if path else str(k), found) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v, f"{path}[{i}]", found) for i, v in enumerate(value)]
    return value


def table(*names: str, wide: bool, right: Collection[str] = ()) -> Table:
    """A table as `-o` asks for it. Narrow (`normal`): no box and two spaces between columns, so
    that the columns a command keeps fit 80; a cell wraps between words and folds a word wider than
    its column, never cutting it short. `wide`: ruled under the header, for `result(..., fit=False)`
    to print at its natural width. Columns named in `right` hold figures, aligned right. Cells
    given as `str` are rich markup, as in any table: free text (an error) goes in as `Text`."""
    from rich import box
    from rich.table import Table
    from rich.text import Text

    shown = Table(box=box.HEAVY_HEAD if wide else None, pad_edge=wide, header_style="bold")
    for name in names:  # a header is text, not markup: `[interval]` stays
        shown.add_column(Text(name), justify="right" if name in right else "left", overflow="fold")
    return shown


def host_line(host: str, text: object) -> str:
    """A line about one host, the host named once (a HostError's text may already start with it)."""
    said = str(text)
    return said if said.startswith(f"{host}: ") else f"{host}: {said}"
