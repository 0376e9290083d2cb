"""The sglang engine probe: ask the installed engine itself what it will capture and what it parses.

A single self-contained file (standard library only) that specctl runs with the engine's own
interpreter, locally or on a host; specctl need not be installed there. It reads one JSON request
on stdin and writes one JSON answer on stdout:

    request  {"captures": [{"architecture": "DeepseekV3ForCausalLM", "num_layers": 61,
                            "queries": [null, [2, 30, 58]]}],
              "argv": [["--model-path", "m", ...]]}
    answer   {"engine": "sglang", "version": "0.5.23",
              "captures": [{"architecture": ..., "num_layers": 61, "supported": true, "module": ..., "results":
                            [{"ids": null, "requested": [2, 30, 58], "marked": null, "error": null}, ...]}],
              "parse": [{"argv": [...], "ok": true, "error": null}], "seconds": {...}}

Capture: the engine's own `set_eagle3_layers_to_capture` is called on a stub object that has
`config.num_hidden_layers`, `pp_group.is_last_rank` and the inner models the method reaches (no
weights, no GPU); `requested` is the `layers_to_capture` list it writes, `marked` the layers it
flags when it marks layers instead. Parse: the rendered launch flags go through
`ServerArgs.add_cli_args` and `ServerArgs.from_cli_args`, the parser's error text is kept.
Only the model module of the asked architecture and the server-args module are imported.

Run with arguments, `PYTHON -c PROBE VERSION WORD...`, it is a release's proof before anything stops
(`prove`): the launch argv's flags through the same parser, and the installed version against VERSION;
one JSON line {"version", "check", "error"} on stdout.
"""

from __future__ import annotations

import argparse
import ast
import contextlib
import importlib
import inspect
import io
import json
import re
import sys
import textwrap
import time
import types
from pathlib import Path
from typing import Any

SETTER = "set_eagle3_layers_to_capture"


def engine_version() -> str | None:
    try:
        from importlib.metadata import version

        return version("sglang")
    except Exception:  # noqa: BLE001 - a missing or broken install is an answer, not a crash
        return None


# --- capture ---------------------------------------------------------------------------------------


def find_model_module(architecture: str) -> str | None:
    """The sglang.srt.models module defining `architecture`, found by reading files, not importing all."""
    import importlib.util

    spec = importlib.util.find_spec("sglang.srt.models")
    if spec is None or not spec.submodule_search_locations:
        return None
    pattern = re.compile(rf"^class {re.escape(architecture)}\b", re.M)
    for directory in spec.submodule_search_locations:
        for path in sorted(Path(directory).glob("*.py")):
            if pattern.search(path.read_text(encoding="utf-8", errors="replace")):
                return f"sglang.srt.models.{path.stem}"
    return None


def _init_children(cls: type) -> dict[str, type]:
    """Classes that `__init__` along the MRO assigns to `self.<attr>`: the inner models a setter reaches."""
    children: dict[str, type] = {}
    for klass in reversed(cls.__mro__):
        init = klass.__dict__.get("__init__")
        if init is None or klass.__module__ == "builtins":
            continue
        try:
            tree = ast.parse(textwrap.dedent(inspect.getsource(init)))
        except (OSError, TypeError, SyntaxError):
            continue
        namespace = vars(sys.modules[klass.__module__])
        for node in ast.walk(tree):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            for target in node.targets:
                if (
                    isinstance(target, ast.Attribute)
                    and isinstance(target.value, ast.Name)
                    and target.value.id == "self"
                ):
                    found = _called_class(cls, namespace, node.value.func)
                    if found is not None:
                        children[target.attr] = found
    return children


def _called_class(cls: type, namespace: dict[str, Any], func: ast.expr) -> type | None:
    if isinstance(func, ast.Name):
        value = namespace.get(func.id)
        return value if isinstance(value, type) else None
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        value = getattr(cls, func.attr, None)
        if isinstance(value, type):  # `model_cls = SomeModel` class attribute
            return value
        if callable(value):  # a builder method: `return SomeModel(...)`
            try:
                tree = ast.parse(textwrap.dedent(inspect.getsource(value)))
            except (OSError, TypeError, SyntaxError):
                return None
            module_ns = vars(sys.modules[value.__module__])
            for node in ast.walk(tree):
                if (
                    isinstance(node, ast.Return)
                    and isinstance(node.value, ast.Call)
                    and isinstance(node.value.func, ast.Name)
                ):
                    found = module_ns.get(node.value.func.id)
                    if isinstance(found, type):
                        return found
    return None


class Stub:
    """Stands in for a model object: has what a setter reads, records what it writes."""

    def __init__(self, cls: type, num_layers: int) -> None:
        config = types.SimpleNamespace(num_hidden_layers=num_layers)
        config.text_config = config
        self.__dict__.update(
            _cls=cls,
            _n=num_layers,
            _writes=set(),
            config=config,
            pp_group=types.SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1),
            capture_aux_hidden_states=False,
            layers_to_capture=[],
            start_layer=0,
            end_layer=num_layers,
            layers=[types.SimpleNamespace() for _ in range(num_layers)],
        )

    def __setattr__(self, key: str, value: Any) -> None:
        self._writes.add(key)
        self.__dict__[key] = value

    def __getattr__(self, key: str) -> Any:
        cls = self.__dict__["_cls"]
        if key == SETTER and hasattr(cls, SETTER):
            return types.MethodType(getattr(cls, SETTER), self)
        child = _init_children(cls).get(key)
        if child is not None:
            stub = Stub(child, self.__dict__["_n"])
            self.__dict__[key] = stub
            return stub
        raise AttributeError(f"the probe's stub for {cls.__name__} has no {key!r}")

    def stubs(self) -> list[Stub]:
        found = [self]
        for value in list(self.__dict__.values()):
            if isinstance(value, Stub):
                found += value.stubs()
        return found


@contextlib.contextmanager
def _single_rank(module: types.ModuleType) -> Any:
    """Some setters ask the module's `get_pp_group()` or `get_parallel().pp_group` (no process group
    exists here); for the duration of the call they answer as the last (only) pipeline rank."""
    pp_group = types.SimpleNamespace(is_last_rank=True, is_first_rank=True, world_size=1)
    answers = {"get_pp_group": lambda: pp_group, "get_parallel": lambda: types.SimpleNamespace(pp_group=pp_group)}
    originals = {name: getattr(module, name) for name in answers if hasattr(module, name)}
    for name in originals:
        setattr(module, name, answers[name])
    try:
        yield
    finally:
        for name, original in originals.items():
            setattr(module, name, original)


def capture(architecture: str, num_layers: int, queries: list[list[int] | None]) -> dict[str, Any]:
    module_name = find_model_module(architecture)
    if module_name is None:
        return {"supported": False, "reason": f"no sglang model module defines {architecture}", "results": []}
    with contextlib.redirect_stdout(io.StringIO()):
        module = importlib.import_module(module_name)
    cls = getattr(module, architecture)
    if not hasattr(cls, SETTER):
        return {
            "supported": False,
            "module": module_name,
            "class": architecture,
            "reason": f"{architecture} has no {SETTER}: no EAGLE-3 capture in this version",
            "results": [],
        }
    results = []
    for ids in queries:
        stub = Stub(cls, num_layers)
        error = stub_error = None
        try:
            with _single_rank(sys.modules[getattr(cls, SETTER).__module__]):
                getattr(stub, SETTER)(list(ids) if ids is not None else None)
        except IndexError as exc:
            error = f"IndexError: {exc}"
        except Exception as exc:  # noqa: BLE001 - reported: the stub does not fit this engine's code
            stub_error = f"{type(exc).__name__}: {exc}"
        owners = [s for s in stub.stubs() if "layers_to_capture" in s._writes]
        requested = list(owners[0].layers_to_capture) if len(owners) == 1 else None
        marked = None
        if len(owners) == 1 and any(hasattr(layer, "_is_layer_to_capture") for layer in owners[0].layers):
            marked = [i for i, layer in enumerate(owners[0].layers) if getattr(layer, "_is_layer_to_capture", False)]
        if len(owners) > 1:
            stub_error = f"layers_to_capture written on {len(owners)} objects"
        results.append({"ids": ids, "requested": requested, "marked": marked, "error": error, "stub_error": stub_error})
    return {"supported": True, "module": module_name, "class": architecture, "results": results}


# --- launch flags ----------------------------------------------------------------------------------


class _ParseError(Exception):
    pass


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> Any:  # argparse would print and exit; keep the text instead
        raise _ParseError(message)


def parse(argvs: list[list[str]]) -> list[dict[str, Any]]:
    with contextlib.redirect_stdout(io.StringIO()):
        from sglang.srt.server_args import ServerArgs
    answers = []
    for argv in argvs:
        parser = _Parser(prog="sglang.launch_server")
        ServerArgs.add_cli_args(parser)
        try:
            namespace = parser.parse_args(argv)
            ServerArgs.from_cli_args(namespace)
            answers.append({"argv": argv, "ok": True, "error": None})
        except _ParseError as exc:
            answers.append({"argv": argv, "ok": False, "error": str(exc)})
        except Exception as exc:  # noqa: BLE001 - a constructor error is the engine's answer too
            answers.append({"argv": argv, "ok": False, "error": f"{type(exc).__name__}: {exc}"})
    return answers


def answer(request: dict[str, Any]) -> dict[str, Any]:
    result: dict[str, Any] = {"engine": "sglang", "version": engine_version(), "seconds": {}}
    if result["version"] is None:
        result["error"] = "sglang is not installed for this interpreter"
        return result
    if request.get("captures"):
        start = time.perf_counter()
        result["captures"] = [
            {
                "architecture": job["architecture"],
                "num_layers": int(job["num_layers"]),
                **capture(job["architecture"], int(job["num_layers"]), job.get("queries") or [None]),
            }
            for job in request["captures"]
        ]
        result["seconds"]["capture"] = round(time.perf_counter() - start, 3)
    if request.get("argv"):
        start = time.perf_counter()
        result["parse"] = parse(request["argv"])
        result["seconds"]["parse"] = round(time.perf_counter() - start, 3)
    return result


def prove(pinned: str, words: list[str]) -> dict[str, Any]:
    """A release's proof before anything stops (`PYTHON -c PROBE VERSION WORD...`): sglang imports, at
    `pinned` when one is given, and its own parser accepts the launch flags `words` (the launch argv
    after the interpreter). `check` names the first that fails, None when all hold."""
    found = engine_version()
    if found is None:
        return {"version": None, "check": "engine-import", "error": "sglang is not installed for this interpreter"}
    if pinned and found != pinned:
        return {"version": found, "check": "engine-version", "error": f"sglang is {found}, the release pins {pinned}"}
    flags = words[2:] if words[:2] == ["-m", "sglang.launch_server"] else words
    try:
        [answer] = parse([flags])
    except Exception as exc:  # noqa: BLE001 - the parser's module does not import: the engine is broken
        return {"version": found, "check": "engine-import", "error": f"{type(exc).__name__}: {exc}"}
    if not answer["ok"]:
        return {"version": found, "check": "engine-parse", "error": answer["error"]}
    return {"version": found, "check": None, "error": None}


def main() -> int:
    import logging
    import warnings

    warnings.simplefilter("ignore")
    logging.disable(logging.WARNING)
    if len(sys.argv) > 1:  # a prove: the pinned version and the launch argv as arguments, nothing on stdin
        out = sys.stdout
        sys.stdout = sys.stderr
        try:
            proved = prove(sys.argv[1], sys.argv[2:])
        finally:
            sys.stdout = out
        out.write(json.dumps(proved) + "\n")
        return 0
    request = json.loads(sys.stdin.read() or "{}")
    out = sys.stdout
    sys.stdout = sys.stderr  # engine imports may print; keep stdout for the one JSON answer
    try:
        data = answer(request)
    finally:
        sys.stdout = out
    out.write(json.dumps(data) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
