"""The reference engine's proof of a release, run by the host's interpreter before anything stops:
`PYTHON -c SOURCE VERSION WORD...` (WORD...: the launch argv after the interpreter). The engine
imports, and its own launch parser (`server.parse_args`, what `main` starts from) accepts the flags.
VERSION is "" (the reference engine pins no installed version: then none is read). One JSON line on stdout."""

import contextlib
import io
import json
import sys


def prove(pinned: str, words: list[str]) -> dict[str, object]:
    try:
        from specctl.engines.reference import server
    except Exception as exc:  # noqa: BLE001 - specctl missing or broken for this interpreter: the answer
        return {"version": None, "check": "engine-import", "error": f"{type(exc).__name__}: {exc}"}
    found = None
    if pinned:  # importlib.metadata is half this proof's time: read only when a version is asked for
        from importlib.metadata import version

        found = version("specctl")
    flags = words[2:] if words[:2] == ["-m", "specctl.engines.reference"] else words
    said = io.StringIO()
    try:
        with contextlib.redirect_stderr(said):
            server.parse_args(flags)
    except SystemExit:
        lines = said.getvalue().strip().splitlines() or ["the launch flags are refused"]
        return {"version": found, "check": "engine-parse", "error": lines[-1].split("error: ", 1)[-1]}
    return {"version": found, "check": None, "error": None}


print(json.dumps(prove(sys.argv[1], sys.argv[2:])))
