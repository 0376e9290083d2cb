#!/usr/bin/env python3
"""Dump the real argparse flag catalog of every sglang release the capture table covers.

Run it with the python of the sglang venv (see ``scripts/sglang-cpu/setup.sh``)::

    .venv-sglang/bin/python scripts/gen_sglang_flags.py              # the installed sglang
    .venv-sglang/bin/python scripts/gen_sglang_flags.py --check      # exit 1 if it differs
    .venv-sglang/bin/python scripts/gen_sglang_flags.py --all        # every release of conventions.json
    .venv-sglang/bin/python scripts/gen_sglang_flags.py --releases 0.4.6,0.5.12.post1 --check
    .venv-sglang/bin/python scripts/gen_sglang_flags.py --wheel sglang-0.5.5-py3-none-any.whl --stdout
    options: --cache DIR (or SPECCTL_SGLANG_WHEELS), --jobs N, --python PY, --output FILE, --no-help

Each parser is built exactly as ``sglang.launch_server`` builds it
(``ServerArgs.add_cli_args(argparse.ArgumentParser())``).  For the installed sglang that happens in
this process.  For a release given by ``--releases``/``--all``/``--wheel``, its wheel (from the cache
``~/.cache/specctl/sglang-wheels``) is extracted to a temporary directory and a child python puts it
ahead of the installed sglang on ``sys.path`` and imports *that release's* ``sglang.srt.server_args``.
The venv is pinned for 0.5.23, so an older release may import what the venv lacks (``fastapi``) or
meet a newer library (``from triton.runtime.cache import default_cache_dir``, a transformers config
name registered twice).  The child's meta-path finder (``StandInFinder``) then supplies a permissive
stand-in, but only for an import that genuinely fails: one no real finder resolves, a name missing
from a real module, or a module whose code raises, and only when no enclosing ``try``/``suppress``
of the importing code would have handled that error (optional imports keep failing as they would,
and ``importlib.util.find_spec`` probes still answer None).  What was stood in is recorded per
release (``stand_ins``).  The release's code is never edited.  A parser whose data (a default, a
type, choices, help) holds a stand-in, or whose ``add_cli_args`` (or server_args.py's own
import-time code) used one, is refused: then, as
when the import or the parser fails, the release is written under ``unavailable`` with the reason
and the run exits 1.

The catalogs are stored together in ``specctl/engines/sglang/data/flags/catalog.json``: each distinct
argument once (``records``, one row of ``fields`` values per line) and each release as the edit of
the next newer one (``["keep", position, count]``/``["rows", first, count]``; the format is
documented and written by ``specctl.engines.flags.encode_store``, whose module is also the reader and
is loaded here by path).  A release expands to the document this script printed before the store
existed::

    {"engine": "sglang", "version": ..., "source": ...,
     "arguments": [{"flags", "dest", "action", "type", "nargs", "default",
                    "choices", "required", "help"}, ...]}

which ``--stdout`` prints and ``--check`` compares byte for byte (a unified diff on a difference).

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

This script uses only the standard library plus sglang itself, and works with the msgspec
``ServerArgs`` of 0.5.23 as well as the ``@dataclass`` one of 0.4.x-0.5.x (both have the
staticmethod ``add_cli_args``).
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import difflib
import enum
import functools
import importlib.abc
import importlib.machinery
import importlib.util
import inspect
import json
import os
import re
import subprocess
import sys
import tempfile
import time
import types
import zipfile
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
DATA_DIR = REPO_ROOT / "specctl" / "engines" / "sglang" / "data"
DEFAULT_OUT_DIR = DATA_DIR / "flags"
STORE_NAME = "catalog.json"
CONVENTIONS = DATA_DIR / "conventions.json"
DEFAULT_CACHE = Path(os.environ.get("SPECCTL_SGLANG_WHEELS", "~/.cache/specctl/sglang-wheels")).expanduser()
SOURCE = "argparse parser built by sglang.srt.server_args.ServerArgs.add_cli_args"
TARGET_MODULE = "sglang.srt.server_args"
CHILD_TIMEOUT_S = 600


# --- the parser and its description (the field conventions above) ----------------------------------


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


# --- stand-ins for imports an older release cannot make in this venv (child process only) -----------

_IMPORTLIB_DIR = os.path.dirname(importlib.__file__)
_MISSING_NAME = re.compile(r"cannot import name '(\w+)' from '([\w.]+)'")
_watched_file = ""  # the release's server_args.py: stand-ins its own code uses are recorded
_building = False  # True while add_cli_args runs: every stand-in use is recorded
_touched: list[str] = []


def _touch(what: object, how: str) -> None:
    """Record a use of a stand-in that could shape the parser: any while it is built, and any by the
    code of server_args.py itself (its import-time constants; importing a name is not a use)."""
    caller = sys._getframe(2).f_code.co_filename
    if _building or (caller == _watched_file and how != "name"):
        _touched.append(f"{how} {what!r}" + ("" if _building else f" ({os.path.basename(caller)})"))


def _decorates(args: tuple[Any, ...], kwargs: dict[str, Any]) -> bool:
    return len(args) == 1 and not kwargs and (inspect.isfunction(args[0]) or inspect.isclass(args[0]))


class _StandInType(type):
    """Metaclass of stand-in classes: any attribute is another stand-in, so module-level code that
    subclasses, decorates with, annotates with or indexes a missing name runs on."""

    def __getattr__(cls, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        _touch(cls, "attribute of")
        return _stand_in_class(cls.__module__, f"{cls.__qualname__}.{name}")

    def __getitem__(cls, item: Any) -> Any:
        return cls

    def __iter__(cls) -> Any:
        _touch(cls, "iteration over")
        return iter(())

    def __call__(cls, *args: Any, **kwargs: Any) -> Any:
        _touch(cls, "call of")
        if cls.__dict__.get("_stand_in") and _decorates(args, kwargs):
            return args[0]  # a missing decorator leaves what it decorates as it is
        return super().__call__(*args, **kwargs)

    def __repr__(cls) -> str:
        return f"<stand-in {cls.__module__}.{cls.__qualname__}>"


class _StandIn(metaclass=_StandInType):
    """An instance of a stand-in class, as permissive as the class; empty and false."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        pass

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        _touch(self, "attribute of")
        return _stand_in_class(type(self).__module__, f"{type(self).__qualname__}.{name}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        _touch(self, "call of")
        return args[0] if _decorates(args, kwargs) else _StandIn()

    def __getitem__(self, key: Any) -> Any:
        _touch(self, "item of")
        return _StandIn()

    def __iter__(self) -> Any:
        _touch(self, "iteration over")
        return iter(())

    def __len__(self) -> int:
        _touch(self, "truth or length of")
        return 0

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (type(self),)

    def __repr__(self) -> str:
        return f"<stand-in {type(self).__module__}.{type(self).__qualname__}()>"


@functools.cache
def _stand_in_class(module: str, qualname: str) -> type:
    cls = _StandInType(qualname.rsplit(".", 1)[-1], (_StandIn,), {"_stand_in": True, "__module__": module})
    cls.__qualname__ = qualname
    return cls


class _StandInModule(types.ModuleType):
    """A missing module, or one whose code raised: what it did not define is a stand-in."""

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        _touch(f"{self.__name__}.{name}", "name")
        return _stand_in_class(self.__name__, name)


def _is_stand_in(value: Any) -> bool:
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_is_stand_in(v) for v in value)
    if isinstance(value, dict):
        return any(_is_stand_in(k) or _is_stand_in(v) for k, v in value.items())
    return isinstance(value, (_StandIn, _StandInType, _StandInModule))


class _MissingModuleLoader(importlib.abc.Loader):
    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StandInModule(spec.name)
        module.__path__ = []  # a package, so that its submodules are stand-ins too
        module.__all__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        pass


class StandInFinder(importlib.abc.MetaPathFinder):
    """First on sys.meta_path; every import goes to the real finders.  A module none of them finds,
    a name missing from a real module, or a module whose code raises becomes a stand-in, unless the
    code that asked for the import would handle the error itself."""

    def __init__(self, protected: frozenset[str]) -> None:
        self.protected = protected
        self.stood_in: dict[str, str] = {}
        self._missing: set[str] = set()

    def find_spec(self, name: str, path: Any, target: Any = None) -> importlib.machinery.ModuleSpec | None:
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec: importlib.machinery.ModuleSpec | None = finder.find_spec(name, path, target)
            if spec is not None:
                self._guard(spec)
                return spec
        importer = _importer_frames(sys._getframe(1), lookup=True)
        if importer is None or name in self.protected or _handled(importer, ModuleNotFoundError):
            return None
        if name.rpartition(".")[0] not in self._missing:  # what lies below a missing package is implied
            self.stood_in[name] = "not installed"
        self._missing.add(name)
        return importlib.machinery.ModuleSpec(name, _MissingModuleLoader(), is_package=True)

    def _guard(self, spec: importlib.machinery.ModuleSpec) -> None:
        """Wrap the loader's create/exec (on the instance, so its type stays what libraries expect)."""
        loader = spec.loader
        if loader is None or isinstance(loader, type) or spec.name in self.protected:
            return  # builtin/frozen importers are classes; the target module must import for real
        real_create = getattr(loader, "create_module", None)
        real_exec = getattr(loader, "exec_module", None)
        if real_exec is None:
            return
        finder, failed = self, []

        def create_module(spec: importlib.machinery.ModuleSpec) -> types.ModuleType | None:
            try:
                return real_create(spec) if real_create is not None else None
            except Exception as exc:
                if not finder._give_up_on(spec.name, exc):
                    raise
                failed.append(exc)
                return _StandInModule(spec.name)

        def exec_module(module: types.ModuleType) -> None:
            if failed:
                return
            supplied: set[tuple[str, str]] = set()
            while True:
                try:
                    real_exec(module)
                    return
                except Exception as exc:
                    if finder._handled_by_importer(exc):
                        raise
                    missing = _missing_name(exc)
                    if missing is not None and missing not in supplied:
                        owner, attribute = missing
                        setattr(sys.modules[owner], attribute, _stand_in_class(owner, attribute))
                        finder.stood_in.setdefault(f"{owner}.{attribute}", f"not in the installed {owner.split('.')[0]}")
                        supplied.add(missing)
                        continue  # run the module again, now that the name exists
                    finder.stood_in[module.__name__] = _reason(exc)
                    module.__class__ = _StandInModule  # keep what ran before the error
                    return

        try:
            setattr(loader, "create_module", create_module)
            setattr(loader, "exec_module", exec_module)
        except (AttributeError, TypeError):
            pass

    def _handled_by_importer(self, exc: Exception) -> bool:
        importer = _importer_frames(sys._getframe(2), lookup=False)
        return importer is None or _handled(importer, type(exc))

    def _give_up_on(self, name: str, exc: Exception) -> bool:
        if self._handled_by_importer(exc):
            return False
        self.stood_in[name] = _reason(exc)
        return True


def _missing_name(exc: Exception) -> tuple[str, str] | None:
    """(module, name) of `from module import name` failing on a real, fully imported module."""
    match = _MISSING_NAME.search(str(exc)) if isinstance(exc, ImportError) else None
    if match is None:
        return None
    attribute, owner = match.groups()
    module = sys.modules.get(owner)
    if module is None or isinstance(module, _StandInModule) or getattr(module, attribute, None) is not None:
        return None
    return owner, attribute


def _reason(exc: BaseException) -> str:
    """The error's type and first line, without file paths (they differ between machines)."""
    first = (str(exc).strip().splitlines() or [""])[0]
    first = re.sub(r"\s*\((?:[^()]*/)[^()]*\)", "", first)
    return f"{type(exc).__name__}: {first}"[:240]


def _is_importlib(filename: str) -> bool:
    return filename.startswith("<frozen importlib") or filename.startswith(_IMPORTLIB_DIR + os.sep)


def _importer_frames(frame: types.FrameType | None, *, lookup: bool) -> list[types.FrameType] | None:
    """The frames of the code that asked for the import, innermost first (the machinery's and this
    script's own frames left out).  For a `lookup` (no finder found the module) None when its failure
    is expected: an ``importlib.util.find_spec`` probe for an optional package, or ``from package
    import name`` trying `name` as a submodule (the import system ignores that and then looks for the
    name as an attribute: a missing one is supplied then)."""
    while frame is not None and (_is_importlib(frame.f_code.co_filename) or frame.f_code.co_filename == __file__):
        code = frame.f_code
        if lookup and (code.co_name == "_handle_fromlist" or (
                code.co_name == "find_spec" and code.co_filename in ("<frozen importlib.util>", importlib.util.__file__))):
            return None
        frame = frame.f_back
    frames: list[types.FrameType] = []
    while frame is not None:
        if not _is_importlib(frame.f_code.co_filename) and frame.f_code.co_filename != __file__:
            frames.append(frame)
        frame = frame.f_back
    return frames


def _handled(frames: list[types.FrameType], exc_type: type[BaseException]) -> bool:
    """Whether a try/except (or contextlib.suppress) around any of these frames' current line catches it."""
    for frame in frames:
        for start, end, handlers in _handler_table(frame.f_code.co_filename):
            if not start <= frame.f_lineno <= end:
                continue
            for handler in handlers:
                if handler is None:
                    return True
                caught = _exception_classes(handler, frame)
                if caught and issubclass(exc_type, caught):
                    return True
    return False


def _exception_classes(expr: ast.expr, frame: types.FrameType) -> tuple[type[BaseException], ...]:
    if not all(isinstance(node, (ast.Name, ast.Attribute, ast.Tuple, ast.Load)) for node in ast.walk(expr)):
        return ()
    try:
        value = eval(compile(ast.Expression(expr), "<handler>", "eval"), frame.f_globals, frame.f_locals)
    except Exception:
        return ()
    items = value if isinstance(value, tuple) else (value,)
    return tuple(v for v in items if isinstance(v, type) and issubclass(v, BaseException))


@functools.cache
def _handler_table(filename: str) -> tuple[tuple[int, int, tuple[ast.expr | None, ...]], ...]:
    """(first line, last line, handler types) of every try body and suppress() block in a file."""
    try:
        with open(filename, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
    except (OSError, SyntaxError, ValueError):
        return ()
    table = []
    for node in ast.walk(tree):
        if isinstance(node, (ast.Try, ast.TryStar)) and node.handlers and node.body:
            table.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno,
                          tuple(h.type for h in node.handlers)))
        elif isinstance(node, (ast.With, ast.AsyncWith)) and node.body:
            for item in node.items:
                call = item.context_expr
                if isinstance(call, ast.Call) and "suppress" in (getattr(call.func, "id", None), getattr(call.func, "attr", None)):
                    table.append((node.body[0].lineno, node.body[-1].end_lineno or node.body[-1].lineno,
                                  tuple(call.args)))
    return tuple(table)


def build_release_parser(release_dir: Path) -> dict[str, Any]:
    """In the child: the description of the parser of the release extracted at `release_dir`."""
    global _building, _watched_file
    sys.path.insert(0, str(release_dir))
    _watched_file = str(release_dir / (TARGET_MODULE.replace(".", "/") + ".py"))
    finder = StandInFinder(frozenset({TARGET_MODULE}))
    sys.meta_path.insert(0, finder)
    started = time.perf_counter()
    with contextlib.redirect_stdout(sys.stderr):
        module = importlib.import_module(TARGET_MODULE)
        if module.__file__ != _watched_file:
            raise RuntimeError(f"{TARGET_MODULE} came from {module.__file__}, not from the release")
        add_cli_args = getattr(getattr(module, "ServerArgs"), "add_cli_args", None)
        if add_cli_args is None:
            raise RuntimeError("ServerArgs has no add_cli_args")
        parser = argparse.ArgumentParser()
        _building = True
        try:
            add_cli_args(parser)
        finally:
            _building = False
    tainted = [action.option_strings[0] if action.option_strings else action.dest for action in parser._actions
               if _is_stand_in((action.default, action.type, action.choices)) or "<stand-in" in str(action.help)]
    if _touched or tainted:
        raise RuntimeError("the parser depends on stand-ins: "
                           + "; ".join([*(f"{flag} holds one" for flag in tainted), *sorted(set(_touched))])[:400])
    return {"arguments": describe(parser), "stand_ins": dict(sorted(finder.stood_in.items())),
            "seconds": round(time.perf_counter() - started, 2)}


def _child_main(release_dir: Path, result: Path) -> int:
    try:
        answer = build_release_parser(release_dir)
    except BaseException as exc:  # the parent reports it: this release gets no catalog
        import traceback

        traceback.print_exc()
        answer = {"error": _reason(exc)}
    result.write_text(json.dumps(answer, ensure_ascii=False), encoding="utf-8")
    return 0 if "error" not in answer else 2


# --- releases, wheels and the store (parent) ----------------------------------------------------------


def version_key(version: str) -> tuple[int, ...]:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    if match is None:
        raise ValueError(f"not a final release: {version}")
    return tuple(int(x or 0) for x in match.groups())


def covered_releases() -> list[str]:
    """The releases of the capture table, the ones a profile can pin."""
    releases: list[str] = json.loads(CONVENTIONS.read_text(encoding="utf-8"))["releases"]
    return releases


def wheel_for(cache: Path, version: str) -> Path:
    hits = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if hits:
        return hits[0]
    cache.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
                    "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
                    "--platform", "manylinux_2_34_x86_64", "--platform", "any", "-d", str(cache),
                    f"sglang=={version}"], check=False)
    hits = sorted(cache.glob(f"sglang-{version}-*.whl"))
    if not hits:
        raise FileNotFoundError(f"no wheel of sglang {version} in {cache} and `pip download` did not fetch one")
    return hits[0]


def wheel_version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def build_from_wheel(wheel: Path, python: str) -> dict[str, Any]:
    """Extract the wheel and let a child python build its parser; {"error": why} when it cannot."""
    with tempfile.TemporaryDirectory(prefix="sglang-flags-") as tmp:
        release_dir, result = Path(tmp) / "release", Path(tmp) / "result.json"
        with zipfile.ZipFile(wheel) as archive:
            archive.extractall(release_dir, [n for n in archive.namelist() if n.startswith(("sglang/", "sglang-"))])
        env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        try:
            proc = subprocess.run([python, str(Path(__file__).resolve()), "--build-release", str(release_dir),
                                   "--result", str(result)], capture_output=True, text=True, cwd=tmp, env=env,
                                  timeout=CHILD_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            return {"error": f"building the parser took more than {CHILD_TIMEOUT_S} s"}
        if not result.is_file():
            tail = proc.stderr.strip().splitlines()[-1:] or [f"exit status {proc.returncode}"]
            return {"error": f"the child python failed: {tail[0][:240]}"}
        answer: dict[str, Any] = json.loads(result.read_text(encoding="utf-8"))
        return answer


@functools.cache
def _flags_module() -> types.ModuleType:
    """specctl/engines/flags.py, the store's writer and reader, loaded by path (stdlib only)."""
    spec = importlib.util.spec_from_file_location("_specctl_flags", REPO_ROOT / "specctl" / "engines" / "flags.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def read_store(path: Path) -> tuple[dict[str, dict[str, Any]], dict[str, str]]:
    """Every release of the store with its arguments expanded, and the versions without a catalog."""
    if not path.is_file():
        return {}, {}
    flags = _flags_module()
    flags._store.cache_clear()  # the file may have been rewritten since
    releases = {v: flags.release_entry(path, v) for v in flags.shipped_versions(path)}
    return releases, flags.unavailable_versions(path)


def write_store(path: Path, releases: dict[str, dict[str, Any]], unavailable: dict[str, str]) -> None:
    flags = _flags_module()
    order = sorted(releases, key=version_key)
    text = flags.encode_store(
        "sglang", {v: releases[v] for v in order}, {v: unavailable[v] for v in sorted(unavailable, key=version_key)},
        {"generated_by": "scripts/gen_sglang_flags.py", "source": SOURCE},
    )
    if path.is_file() and path.read_text(encoding="utf-8") == text:
        print(f"gen_sglang_flags: {path} unchanged", file=sys.stderr)
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    print(f"gen_sglang_flags: wrote {path} ({len(releases)} releases, {len(text)} bytes)", file=sys.stderr)


def _diff(version: str, shipped: str, generated: str) -> str:
    lines = list(difflib.unified_diff(shipped.splitlines(keepends=True), generated.splitlines(keepends=True),
                                      fromfile=f"sglang {version} (shipped)", tofile=f"sglang {version} (generated)"))
    text = "".join(lines[:200])
    return text + (f"... ({len(lines) - 200} more diff lines)\n" if len(lines) > 200 else "")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out-dir", type=Path, default=DEFAULT_OUT_DIR,
                    help=f"directory of {STORE_NAME} (default: {DEFAULT_OUT_DIR.relative_to(REPO_ROOT)})")
    ap.add_argument("--output", type=Path, help="exact store file (overrides --out-dir)")
    ap.add_argument("--check", action="store_true",
                    help="do not write; compare with the shipped store and exit 1 on any difference")
    ap.add_argument("--stdout", action="store_true", help="print the catalog of one release instead of storing it")
    ap.add_argument("--no-help", action="store_true", help="with --stdout: leave out the per-argument help line")
    ap.add_argument("--releases", help="comma-separated releases, built from their wheels")
    ap.add_argument("--all", action="store_true", help=f"every release of {CONVENTIONS.relative_to(REPO_ROOT)}")
    ap.add_argument("--wheel", type=Path, action="append", default=[], help="a wheel to build from (repeatable)")
    ap.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"wheel cache (default {DEFAULT_CACHE})")
    ap.add_argument("--jobs", type=int, default=max(1, min(4, os.cpu_count() or 1)), help="child processes at a time")
    ap.add_argument("--python", default=sys.executable, help="python of the sglang venv for the children")
    ap.add_argument("--build-release", type=Path, help=argparse.SUPPRESS)  # child mode
    ap.add_argument("--result", type=Path, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)

    if args.build_release is not None:
        return _child_main(args.build_release, args.result)

    target: Path = args.output or (args.out_dir / STORE_NAME)
    wheels: dict[str, Path] = {wheel_version(w): w for w in args.wheel}
    wanted = covered_releases() if args.all else [v.strip() for v in (args.releases or "").split(",") if v.strip()]
    for version in wanted:
        wheels.setdefault(version, wheel_for(args.cache, version))

    built: dict[str, dict[str, Any]] = {}
    failed: dict[str, str] = {}
    if not wheels:  # the installed sglang, in this process
        version = _sglang_version()
        built[version] = {"arguments": describe(build_parser()), "stand_ins": {}}
    else:
        with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
            futures = {pool.submit(build_from_wheel, wheels[v], args.python): v for v in sorted(wheels, key=version_key)}
            for future in as_completed(futures):
                version, answer = futures[future], future.result()
                if "error" in answer:
                    failed[version] = answer["error"]
                    print(f"gen_sglang_flags: sglang {version}: NO CATALOG: {answer['error']}", file=sys.stderr)
                    continue
                built[version] = {k: v for k, v in answer.items() if k != "seconds"}
                print(f"gen_sglang_flags: sglang {version}: {len(answer['arguments'])} arguments in {answer['seconds']} s"
                      f" (stand-ins: {', '.join(answer['stand_ins']) or 'none'})", file=sys.stderr)

    if args.stdout:
        if len(built) != 1:
            print("gen_sglang_flags: --stdout prints one release", file=sys.stderr)
            return 1
        ((version, entry),) = built.items()
        arguments = entry["arguments"] if not args.no_help else [
            {k: v for k, v in a.items() if k != "help"} for a in entry["arguments"]]
        sys.stdout.write(render(version, arguments))
        return 0

    shipped, unavailable = read_store(target)
    if args.check:
        if not target.is_file():
            print(f"gen_sglang_flags: {target} does not exist", file=sys.stderr)
            return 1
        status = 0
        for version, entry in built.items():
            if version not in shipped:
                print(f"gen_sglang_flags: sglang {version} has no catalog in {target}"
                      f" ({unavailable.get(version, 'not in the store')})", file=sys.stderr)
                status = 1
            elif shipped[version] != entry:
                old, new = shipped[version], entry
                sys.stderr.write(_diff(version, render(version, old["arguments"]), render(version, new["arguments"])))
                if old.get("stand_ins") != new.get("stand_ins"):
                    print(f"gen_sglang_flags: sglang {version} stand-ins differ: shipped {old.get('stand_ins')},"
                          f" generated {new.get('stand_ins')}", file=sys.stderr)
                print(f"gen_sglang_flags: sglang {version} differs from {target}", file=sys.stderr)
                status = 1
            else:
                print(f"gen_sglang_flags: sglang {version} is up to date in {target}", file=sys.stderr)
        for version, why in failed.items():
            if unavailable.get(version) != why:
                print(f"gen_sglang_flags: sglang {version} cannot be built ({why}); the store says"
                      f" {unavailable.get(version, 'it has a catalog')!r}", file=sys.stderr)
                status = 1
        return status

    shipped.update(built)
    for version in built:
        unavailable.pop(version, None)
    for version, why in failed.items():
        shipped.pop(version, None)
        unavailable[version] = why
    write_store(target, shipped, unavailable)
    if failed:
        print(f"gen_sglang_flags: {len(failed)} release(s) without a catalog: {', '.join(failed)}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
