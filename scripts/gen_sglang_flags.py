#!/usr/bin/env python3
"""Dump the real argparse flag catalog of the installed sglang.

Run it with the python of the sglang venv (see ``scripts/sglang-cpu/setup.sh``)::

    .venv-sglang/bin/python scripts/gen_sglang_flags.py          # write the catalog
    .venv-sglang/bin/python scripts/gen_sglang_flags.py --check  # exit 1 if it differs

It builds the parser exactly as ``sglang.launch_server`` does
(``ServerArgs.add_cli_args(argparse.ArgumentParser())``) and writes
``specctl/engines/sglang/data/flags/<version>.json``::

    {"engine": "sglang", "version": ..., "source": ...,
     "arguments": [{"flags", "dest", "action", "type", "nargs", "default",
                    "choices", "required", "help"}, ...]}

Arguments appear in the order the parser registered them; argparse's own ``-h``
is left out.  Field conventions (they match the reference dump in
``shared/reference/sglang-<version>-server-args.json``):

* ``action``: argparse's registered name of the action class (``store``,
  ``store_true``, ``store_const``, ``append``, ``count``, ...).  Custom action classes
  (deprecated flags, ``BooleanOptionalAction``) are reported as ``store``.
* ``type``: ``__name__`` of the converter (``str``, ``int``, ``human_readable_int``,
  ``loads`` ...) or ``null``.
* ``nargs``: argparse's value (``null``, ``0`` for flags without a value, ``"?"``,
  ``"*"``, ``"+"``, or an int).
* ``default``/``choices``: JSON values; tuples become lists, and anything JSON
  cannot represent (an object) is written as its ``repr``; enum members as their value.
  Choices given as a set (``--sampling-backend``) are sorted, since their iteration
  order depends on PYTHONHASHSEED; otherwise the parser's order is kept.
* ``help``: the first non-empty line of the help text, whitespace-collapsed;
  ``null`` when absent or suppressed.

This script uses only the standard library plus sglang itself, and works with
0.5.23 (``ServerArgs`` is a msgspec Struct with a staticmethod ``add_cli_args``)
as well as the older 0.5.x layout (``@dataclass class ServerArgs`` with the same
staticmethod).
"""

from __future__ import annotations

import argparse
import contextlib
import difflib
import enum
import io
import json
import sys
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT_DIR = REPO_ROOT / "specctl" / "engines" / "sglang" / "data" / "flags"
SOURCE = "argparse parser built by sglang.srt.server_args.ServerArgs.add_cli_args"


def _sglang_version() -> str:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # pragma: no cover - editable/odd installs
        import sglang

        return str(getattr(sglang, "__version__"))


def build_parser() -> argparse.ArgumentParser:
    """Build the parser with sglang's own ``ServerArgs.add_cli_args``.

    sglang logs/prints while importing on a machine without a GPU; that goes to stderr so
    that stdout stays clean for ``--stdout``.
    """
    with contextlib.redirect_stdout(sys.stderr):
        from sglang.srt import server_args as sa_mod

        server_args_cls = getattr(sa_mod, "ServerArgs")
        add_cli_args = getattr(server_args_cls, "add_cli_args", None)
        if add_cli_args is None:
            raise SystemExit(
                "sglang.srt.server_args.ServerArgs has no add_cli_args; unsupported sglang layout"
            )
        parser = argparse.ArgumentParser()
        add_cli_args(parser)
    return parser


def _action_name(parser: argparse.ArgumentParser, action: argparse.Action) -> str:
    registry: dict[Any, Any] = parser._registries.get("action", {})
    for name, cls in registry.items():
        if name is not None and cls is type(action):
            return str(name)
    return "store"


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, (set, frozenset)):
        return sorted((_jsonable(v) for v in value), key=lambda v: (type(v).__name__, repr(v)))
    return repr(value)


def _choices(choices: Any) -> list[Any] | None:
    """argparse keeps ``choices`` as given; sglang passes a ``set`` for some flags (e.g.
    ``--sampling-backend``), whose iteration order changes with PYTHONHASHSEED.  Unordered
    containers are therefore sorted; lists/tuples/dict keys keep their order."""
    if choices is None:
        return None
    if isinstance(choices, (set, frozenset)):
        return sorted((_jsonable(c) for c in choices), key=lambda c: (type(c).__name__, repr(c)))
    return [_jsonable(c) for c in choices]


def _type_name(t: Any) -> str | None:
    if t is None:
        return None
    if isinstance(t, str):  # argparse allows registered type names
        return t
    name = getattr(t, "__name__", None)
    if name is None:
        name = type(t).__name__
    return str(name)


def _first_help_line(text: Any) -> str | None:
    if not isinstance(text, str) or text == argparse.SUPPRESS:
        return None
    for line in text.strip().splitlines():
        line = " ".join(line.split())
        if line:
            return line
    return None


def describe(parser: argparse.ArgumentParser, *, with_help: bool = True) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        entry: dict[str, Any] = {
            "flags": list(action.option_strings),
            "dest": action.dest,
            "action": _action_name(parser, action),
            "type": _type_name(action.type),
            "nargs": action.nargs,
            "default": _jsonable(action.default),
            "choices": _choices(action.choices),
            "required": bool(action.required),
        }
        if with_help:
            entry["help"] = _first_help_line(action.help)
        out.append(entry)
    return out


def render(version: str, arguments: list[dict[str, Any]]) -> str:
    doc = {"engine": "sglang", "version": version, "source": SOURCE, "arguments": arguments}
    return json.dumps(doc, indent=1, ensure_ascii=False) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out-dir",
        type=Path,
        default=DEFAULT_OUT_DIR,
        help=f"directory for <version>.json (default: {DEFAULT_OUT_DIR.relative_to(REPO_ROOT)})",
    )
    ap.add_argument("--output", type=Path, help="exact output file (overrides --out-dir)")
    ap.add_argument(
        "--check",
        action="store_true",
        help="do not write; compare with the shipped file and exit 1 on any difference",
    )
    ap.add_argument("--stdout", action="store_true", help="print the catalog instead of writing it")
    ap.add_argument("--no-help", action="store_true", help="leave out the per-argument help line")
    args = ap.parse_args(argv)

    version = _sglang_version()
    parser = build_parser()
    text = render(version, describe(parser, with_help=not args.no_help))
    target: Path = args.output or (args.out_dir / f"{version}.json")

    if args.stdout:
        sys.stdout.write(text)
        return 0
    if args.check:
        if not target.is_file():
            print(f"gen_sglang_flags: {target} does not exist", file=sys.stderr)
            return 1
        shipped = target.read_text(encoding="utf-8")
        if shipped == text:
            print(f"gen_sglang_flags: {target} is up to date (sglang {version})", file=sys.stderr)
            return 0
        diff = difflib.unified_diff(
            shipped.splitlines(keepends=True),
            text.splitlines(keepends=True),
            fromfile=f"{target} (shipped)",
            tofile=f"sglang {version} (generated)",
        )
        buf = io.StringIO()
        buf.writelines(diff)
        lines = buf.getvalue().splitlines()
        print("\n".join(lines[:200]), file=sys.stderr)
        if len(lines) > 200:
            print(f"... ({len(lines) - 200} more diff lines)", file=sys.stderr)
        print(f"gen_sglang_flags: {target} differs from the installed sglang {version}", file=sys.stderr)
        return 1

    target.parent.mkdir(parents=True, exist_ok=True)
    if target.is_file() and target.read_text(encoding="utf-8") == text:
        print(f"gen_sglang_flags: {target} unchanged", file=sys.stderr)
        return 0
    target.write_text(text, encoding="utf-8")
    print(f"gen_sglang_flags: wrote {target} ({len(parser._actions) - 1} arguments)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
