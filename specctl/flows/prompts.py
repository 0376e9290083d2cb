"""The prompts verify and baseline send. Where the engine version's chat endpoint returns the
speculative counters, the workload's chat messages; where it does not (sglang before 0.5.13), the
same messages rendered into token ids by the host's own tokenizer and sent to the native /generate.

The rendering runs once per release, on the host, with the engine's Python and the release's
environment (the tokenizer files staging fetched), and is kept in the release directory, so a
rollback verifies on the very same ids."""

from __future__ import annotations

import json

from specctl.engines.base import Engine
from specctl.errors import HostError
from specctl.release.documents import ReleaseDocs
from specctl.release.release import Release
from specctl.verdict.measure import Prompts

PROMPT_IDS_FILE = "prompt-ids.json"

# $1 release dir, $2 the kept file, then the command. A kept rendering is answered as is; a fresh one
# runs in the release's environment and is kept only when it is an answer with ids.
_RENDER = r"""
cd "$1" || exit 1; kept=$2; shift 2
if [ -s "$kept" ]; then exec cat "$kept"; fi
set -a; . ./env; set +a
out=$("$@") || { rc=$?; printf '%s\n' "$out"; exit $rc; }
case $out in '{"ids"'*) printf '%s\n' "$out" >"$kept.tmp" && mv -f "$kept.tmp" "$kept";; esac
printf '%s\n' "$out"
"""
RENDER_TIMEOUT_S = 300.0  # a tokenizer load from a cold disk, with trust_remote_code


def release_prompts(release: Release, docs: ReleaseDocs, engine: Engine, *, ids: bool = False) -> Prompts:
    """What to send this release's server: its workload, through the route its engine version answers
    with counters on; `ids` renders the ids whatever the version (streaming needs the native route)."""
    if not ids and engine.http_contract(docs.profile.engine.version).chat_meta_info:
        return Prompts(docs.workload)
    t = release.transport
    command = engine.chat_ids_command(docs.profile.engine.python, docs.commands()[0])
    done = t.run(
        ["sh", "-c", _RENDER, "sh", release.dir, PROMPT_IDS_FILE, *command],
        stdin=json.dumps([list(r) for r in docs.workload.requests]).encode(),
        timeout_s=RENDER_TIMEOUT_S,
        check=False,
        retry=True,
    )
    lines = done.stdout.strip().splitlines()
    try:
        answer = json.loads(lines[-1])
    except (ValueError, IndexError):
        answer = {"error": f"exit {done.rc}: " + " | ".join((done.stderr or done.stdout).strip().splitlines()[-3:])}
    rendered = answer.get("ids") if isinstance(answer, dict) else None
    if not isinstance(rendered, list) or len(rendered) != len(docs.workload.requests):
        why = answer.get("error") if isinstance(answer, dict) else None
        raise HostError(
            f"{t.name}: verify sends the workload to {docs.profile.engine.name} {docs.profile.engine.version}'s native "
            f"/generate (streamed, or its chat endpoint returns no speculative counters), and the workload could not "
            f"be rendered with the model's tokenizer: "
            f"{why or 'an answer without ids'}",
            host=t.name,
            fix="make the target's tokenizer files (with a chat template) loadable by the engine's Python on the host, "
            "or pin an engine version from 0.5.13 on",
        )
    return Prompts(docs.workload, tuple(tuple(int(i) for i in request) for request in rendered))
