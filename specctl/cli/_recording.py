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
    live: bool = True,
) -> Iterator[Context]:
    """Open the ledger and catch SIGTERM/SIGINT for the block; yields the flows' Context. Progress
    goes to stderr: for people, one line per host that changes in place on a terminal (`live`: not
    for a command that prints its own results as it goes) or plain lines each said once; under
    --json one JSON object per event and note."""
    import threading

    from specctl.cancel import on_signals
    from specctl.cli._progress import HostProgress
    from specctl.flows.session import Context
    from specctl.ledger.ledger import Ledger, ledger_path

    book = Ledger(ledger_path(ledger))
    command = shlex.join(["specctl", *sys.argv[1:]])
    shown = HostProgress(output.err, live=live and output.err.is_terminal and not output.json_mode)
    try:
        with on_signals() as cancel, shown:
            ctx = Context(
                book,
                command,
                reason=reason,
                ssh_config=ssh_config,
                accept_new_host_key=accept_new_host_key,
                secrets_env={n: os.environ[n] for n in secrets or () if n in os.environ},
                environ=os.environ,  # a stored release's `secrets:` by name (a rollback reads them on the host)
                cancel=cancel,
                offline=offline,
            )
            if budget_s is not None:
                ctx.budget_s = budget_s
            if stage_parallel is not None:
                ctx.stage_slots = threading.BoundedSemaphore(stage_parallel)
            if output.json_mode:
                ctx.on_event = lambda host, fields: _json_line(output, host, fields)
                ctx.on_note = lambda host, text: _json_line(output, host, {"event": "note", "text": text})
            else:
                ctx.on_event, ctx.on_progress, ctx.on_note = shown.event, shown.progress, shown.note
            _say_unset(output, [n for n in secrets or () if n not in os.environ])
            yield ctx
    finally:
        book.close()


def _say_unset(output: Output, names: list[str]) -> None:
    """Names in `secrets:` this environment does not set are said, never dropped in silence: a
    deploy's `prove` refuses them (flows/prove.py); a command that starts nothing goes on without them."""
    if not names:
        return
    text = (
        f"secrets: {', '.join(names)} not set in this environment; set them, "
        "or drop them from secrets: if the model is public"
    )
    if output.json_mode:
        _json_line(output, "-", {"event": "note", "text": text})
    else:
        output.err.print(text, markup=False, highlight=False)


def _json_line(output: Output, host: str, fields: dict[str, object]) -> None:
    """One progress event as a JSON object on its own line of stderr (stdout keeps the result), strict
    JSON as every --json line (cli/_output.py `dumps`)."""
    import time

    from specctl.cli._output import dumps

    record = {"host": host, "time": round(time.time(), 3), **fields}
    output.err.file.write(dumps(record) + "\n")
    output.err.file.flush()
