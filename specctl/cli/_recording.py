"""The context a recorded command runs in: the ledger, signal handling, and progress to stderr."""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from specctl.cli._output import Output

if TYPE_CHECKING:
    from specctl.flows.session import Context


@contextmanager
def recorded(
    output: Output,
    *,
    ledger: str | None,
    reason: str | None = None,
    secrets: list[str] | None = None,
    ssh_config: str | None = None,
    accept_new_host_key: bool = False,
    budget_s: float | None = None,
    stage_parallel: int | None = None,
    offline: bool = False,
) -> Iterator[Context]:
    """Open the ledger and catch SIGTERM/SIGINT for the block; yields the flows' Context. Progress
    goes to stderr: lines for people, or under --json one JSON object per event."""
    import json
    import threading
    import time

    from specctl.cancel import on_signals
    from specctl.flows.session import Context
    from specctl.ledger.ledger import Ledger, ledger_path

    book = Ledger(ledger_path(ledger))
    command = shlex.join(["specctl", *sys.argv[1:]])
    try:
        with on_signals() as cancel:
            ctx = Context(
                book,
                command,
                reason=reason,
                ssh_config=ssh_config,
                accept_new_host_key=accept_new_host_key,
                secrets_env={n: os.environ[n] for n in secrets or () if n in os.environ},
                cancel=cancel,
                on_progress=lambda host, text: output.hint(f"[dim]{host}[/]: {text}"),
                offline=offline,
            )
            if budget_s is not None:
                ctx.budget_s = budget_s
            if stage_parallel is not None:
                ctx.stage_slots = threading.BoundedSemaphore(stage_parallel)
            if output.json_mode:

                def event(host: str, fields: dict[str, object]) -> None:
                    record = {"host": host, "time": round(time.time(), 3), **fields}
                    output.err.file.write(json.dumps(record, sort_keys=True, default=str) + "\n")
                    output.err.file.flush()

                ctx.on_event = event
            yield ctx
    finally:
        book.close()
