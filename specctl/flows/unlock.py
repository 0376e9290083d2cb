"""`unlock`: remove a profile's host lock whose holder is gone (or, with force, any), recorded."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from specctl.errors import HostError
from specctl.flows.recorder import recording
from specctl.flows.session import Context
from specctl.hosts.inventory import HostSpec
from specctl.release import lock


def unlock(
    ctx: Context, profile: dict[str, Any], sha256: str, hosts: Sequence[HostSpec], *, force: bool = False
) -> tuple[str, dict[str, Any]]:
    """Per host the lock removed (None: there was none). A holder whose process still runs (or may:
    on another machine) is refused unless `force`; an empty lock (a write cut short by a full disk,
    before locks were written whole) holds nothing and is removed."""
    name = profile["metadata"]["name"]
    removed: dict[str, Any] = {}
    with recording(
        ctx, "unlock", hosts=[h.name for h in hosts], profile=profile, profile_sha256=sha256, inputs={"force": force}
    ) as rec:
        for host in hosts:
            session = ctx.session(host, name)
            held = lock.read(session.transport, session.base)
            empty = held is not None and not str(held.get("unreadable", "x")).strip()  # an interrupted write's
            if held is not None and not force and not empty and lock.holder_alive(held) is not False:
                raise HostError(
                    f"{host.name}: {session.base} is locked by {lock.describe(held)}",
                    host=host.name,
                    fix="wait for it to finish; if you know it is dead, pass --force",
                )
            if held is not None:
                lock.release(session.transport, session.base)
            removed[host.name] = held
            rec.host(host.name, verdict={"removed": held})
        rec.outcome.verdict = {"removed": removed}
    return rec.run_id, removed
