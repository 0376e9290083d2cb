"""Turning errors into what, where and how to fix; the single place errors are printed."""

from __future__ import annotations

import os
import traceback
from typing import Any

from rich.markup import escape
from rich.text import Text

from specctl.cli._output import Output
from specctl.errors import CheckpointError, DocumentError, EngineError, HostError, LedgerError, SpecctlError

BUG_EXIT_CODE = 70  # EX_SOFTWARE: specctl itself failed


def error_data(exc: SpecctlError) -> dict[str, Any]:
    """The error as JSON-ready data (what --json prints)."""
    data: dict[str, Any] = {
        "type": type(exc).__name__,
        "message": exc.message,
        "fix": exc.fix,
        "exit_code": exc.exit_code,
    }
    if isinstance(exc, DocumentError):
        data["problems"] = [p.__dict__ for p in exc.problems]
    if isinstance(exc, CheckpointError):
        data |= {"source": exc.source, "revision": exc.revision}
    if isinstance(exc, EngineError):
        data |= {"engine": exc.engine, "version": exc.version}
    if isinstance(exc, HostError):
        data["host"] = exc.host
    if isinstance(exc, LedgerError):
        data["path"] = exc.path
    if log := getattr(exc, "log", None):  # only some host errors carry a server log's tail
        data["log_tail"] = list(log)
    if notes := getattr(exc, "__notes__", None):
        data["notes"] = list(notes)
    return data


def report(exc: BaseException, output: Output) -> int:
    """Print an error for people (or as JSON) and return the exit code."""
    if not isinstance(exc, SpecctlError):
        if os.environ.get("SPECCTL_DEBUG") == "1":
            traceback.print_exception(exc, file=output.stderr)
        output.err.print(
            f"[bold red]internal error[/] (a bug in specctl): {escape(type(exc).__name__)}: {escape(str(exc))}"
        )
        output.err.print("  run again with SPECCTL_DEBUG=1 for the traceback, and report it")
        if output.json_mode:  # a --json reader sees the end too: one JSON object (one line after a stream)
            output.result(
                {
                    "error": {
                        "type": "InternalError",
                        "message": f"a bug in specctl: {type(exc).__name__}: {exc}",
                        "fix": "run again with SPECCTL_DEBUG=1 for the traceback, and report it",
                        "exit_code": BUG_EXIT_CODE,
                    }
                }
            )
        return BUG_EXIT_CODE
    if os.environ.get("SPECCTL_DEBUG") == "1":
        traceback.print_exception(exc, file=output.stderr)
    if output.json_mode:  # pretty-printed alone; after a stream of JSON lines, one more line (Output.result)
        output.result({"error": error_data(exc)})
        return exc.exit_code
    if isinstance(exc, DocumentError):
        for p in exc.problems:
            where = ":".join(str(x) for x in (p.file, p.line, p.column) if x is not None)
            field = f" {p.field}:" if p.field else ""
            output.err.print(Text.assemble(("error", "bold red"), f": {where}:{field} {p.message}"))
            if p.source_line is not None and p.line is not None:
                gutter = f"{p.line:>5} | "
                output.err.print(Text(gutter + p.source_line, style="dim"))
                output.err.print(Text(" " * (len(gutter) + max((p.column or 1) - 1, 0)) + "^", style="red"))
            output.err.print(Text.assemble(("  fix", "bold"), f": {p.fix}"))
        return exc.exit_code
    output.err.print(Text.assemble(("error", "bold red"), f": {exc.message}"))
    for note in getattr(exc, "__notes__", ()):
        output.err.print(Text(f"  {note}"))
    log = getattr(exc, "log", None)
    if log:
        output.err.print(Text("  last lines of the server log:", style="bold"))
        for line in log[-12:]:
            output.err.print(Text(f"    {line}"))
    if exc.fix:
        output.err.print(Text.assemble(("  fix", "bold"), f": {exc.fix}"))
    return exc.exit_code
