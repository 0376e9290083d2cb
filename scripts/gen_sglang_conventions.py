#!/usr/bin/env python3
"""Generate specctl's sglang capture-convention table from the code of every sglang release.

For each release (wheel from PyPI, read as a zip, never installed) and architecture this script
finds the model class, extracts its `set_eagle3_layers_to_capture` (and the model-level setter it
delegates to) with `ast`, runs it on stub objects for a battery of ids and layer counts, reads how
the forward loop bounds captures, and classifies the behaviour with the named rules of
`specctl.engines.sglang.capture` (it fails loudly when none reproduces the real outputs). Equal
consecutive releases are grouped into rows written to `specctl/engines/sglang/data/conventions.json`.

    python scripts/gen_sglang_conventions.py              # all releases >= 0.4.0, write the table
    python scripts/gen_sglang_conventions.py --check      # compare with the shipped table, exit 1 on a diff
    python scripts/gen_sglang_conventions.py --releases 0.5.20,0.5.23 --check
    options: --cache DIR (or SPECCTL_SGLANG_WHEELS), --offline, --jobs N
"""

from __future__ import annotations

import argparse
import ast
import itertools
import json
import os
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sglang_forward_exec as fx  # noqa: E402

from specctl.engines.sglang.capture import (  # noqa: E402
    EXPLICIT_RULES,
    SGLANG_TABLE_PATH,
    CaptureRule,
    capture,
)

FIRST_RELEASE = (0, 4, 0, 0)
DEFAULT_CACHE = Path(os.environ.get("SPECCTL_SGLANG_WHEELS", "~/.cache/specctl/sglang-wheels")).expanduser()
ARCHITECTURES = (
    "LlamaForCausalLM",
    "Qwen2ForCausalLM",
    "Qwen3ForCausalLM",
    "Qwen2MoeForCausalLM",
    "Qwen3MoeForCausalLM",
    "DeepseekV2ForCausalLM",
    "DeepseekV3ForCausalLM",
    "DeepseekV32ForCausalLM",
    "KimiK25ForConditionalGeneration",
    "GptOssForCausalLM",
    "Glm4MoeForCausalLM",
    "MiniMaxM2ForCausalLM",
    "Qwen3NextForCausalLM",
)
LAYER_COUNTS = (8, 24, 32, 36, 61, 94)
SETTER = "set_eagle3_layers_to_capture"
MODELS_DIR = "sglang/srt/models/"


class DerivationError(RuntimeError):
    """The code of a release does not fit any named rule or known capture mechanism."""


# --- releases and wheels --------------------------------------------------------------------------


def version_key(version: str) -> tuple[int, ...]:
    match = re.fullmatch(r"(\d+)\.(\d+)\.(\d+)(?:\.post(\d+))?", version)
    if match is None:
        raise ValueError(f"not a final release: {version}")
    return tuple(int(x or 0) for x in match.groups())


def is_final(version: str) -> bool:
    return re.fullmatch(r"\d+\.\d+\.\d+(?:\.post\d+)?", version) is not None


def list_releases_online() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pip", "index", "versions", "sglang"], capture_output=True, text=True, check=True
    ).stdout
    match = re.search(r"Available versions:\s*(.+)", out)
    if match is None:
        raise RuntimeError(f"cannot parse `pip index versions sglang` output:\n{out}")
    versions = [v.strip() for v in match.group(1).split(",")]
    return sorted((v for v in versions if is_final(v) and version_key(v) >= FIRST_RELEASE), key=version_key)


def cached_wheel(cache: Path, version: str) -> Path | None:
    hits = sorted(cache.glob(f"sglang-{version}-*.whl"))
    return hits[0] if hits else None


def list_releases_cached(cache: Path) -> list[str]:
    versions = {p.name.split("-")[1] for p in cache.glob("sglang-*.whl")}
    return sorted((v for v in versions if is_final(v) and version_key(v) >= FIRST_RELEASE), key=version_key)


def download(cache: Path, version: str) -> Path:
    """The wheel of `version` in `cache`, fetched with pip when missing (cp311 manylinux or pure)."""
    hit = cached_wheel(cache, version)
    if hit is not None:
        return hit
    cache.mkdir(parents=True, exist_ok=True)
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--quiet",
        "--python-version", "3.11", "--implementation", "cp", "--abi", "cp311",
        "--platform", "manylinux_2_34_x86_64", "--platform", "any", "-d", str(cache), f"sglang=={version}",
    ]
    result = subprocess.run(cmd, capture_output=True, text=True)
    hit = cached_wheel(cache, version)
    if result.returncode != 0 or hit is None:
        raise RuntimeError(f"cannot download sglang=={version}: {result.stderr.strip()[-800:]}")
    return hit


# --- reading a release's model code ----------------------------------------------------------------


@dataclass
class ClassInfo:
    name: str
    file: str
    node: ast.ClassDef
    imports: dict[str, str]  # name -> module file it came from


@dataclass
class Release:
    """The model sources of one release, parsed lazily (a release has ~150 model files)."""

    version: str
    texts: dict[str, str]
    has_boundary_capture_before_read: bool = False
    wheel: Path | None = None
    _trees: dict[str, ast.Module] = field(default_factory=dict)
    _infos: dict[str, list[ClassInfo]] = field(default_factory=dict)
    memo: dict[Any, Any] = field(default_factory=dict)

    def files_defining(self, name: str) -> list[str]:
        key = ("defining", name)
        if key not in self.memo:
            self.memo[key] = self._files_defining(name)
        result: list[str] = self.memo[key]
        return result

    def _files_defining(self, name: str) -> list[str]:
        pattern = re.compile(rf"^class\s+{re.escape(name)}\b", re.M)
        return [path for path, text in self.texts.items() if pattern.search(text)]

    def tree(self, path: str) -> ast.Module:
        if path not in self._trees:
            self._trees[path] = ast.parse(self.texts[path], filename=path)
        return self._trees[path]

    def class_infos(self, name: str) -> list[ClassInfo]:
        if name not in self._infos:
            infos: list[ClassInfo] = []
            for path in self.files_defining(name):
                tree = self.tree(path)
                imports: dict[str, str] = {}
                for node in tree.body:
                    if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("sglang.srt.models"):
                        for alias in node.names:
                            imports[alias.asname or alias.name] = module_file(node.module)
                infos += [ClassInfo(name, path, node, imports) for node in tree.body
                          if isinstance(node, ast.ClassDef) and node.name == name]
            self._infos[name] = infos
        return self._infos[name]

    def entry_file(self, name: str) -> str | None:
        """The file whose `EntryClass` registers `name` (what sglang's model registry serves)."""
        key = ("entry", name)
        if key not in self.memo:
            self.memo[key] = self._entry_file(name)
        result: str | None = self.memo[key]
        return result

    def _entry_file(self, name: str) -> str | None:
        for path, text in self.texts.items():
            if "EntryClass" not in text or not re.search(rf"\b{re.escape(name)}\b", text):
                continue
            for node in self.tree(path).body:
                if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "EntryClass"
                                                       for t in node.targets):
                    values = node.value.elts if isinstance(node.value, (ast.List, ast.Tuple)) else [node.value]
                    if any(isinstance(v, ast.Name) and v.id == name for v in values):
                        return path
        return None


def module_file(module: str) -> str:
    return module.replace(".", "/") + ".py"


def read_release(wheel: Path, version: str) -> Release:
    texts: dict[str, str] = {}
    boundary = False
    with zipfile.ZipFile(wheel) as archive:
        for name in archive.namelist():
            if name.startswith(MODELS_DIR) and name.endswith(".py"):
                texts[name] = archive.read(name).decode("utf-8-sig")
            if name.endswith("layer_boundary/stage.py"):
                boundary = "capture_before_read" in archive.read(name).decode("utf-8-sig")
    return Release(version, texts, has_boundary_capture_before_read=boundary, wheel=wheel)


def find_class(release: Release, name: str, near: ClassInfo | None = None) -> ClassInfo | None:
    """Resolve a class name: same file first, then the file it is imported from, then the registered one."""
    candidates = release.class_infos(name)
    if near is not None:
        for info in candidates:
            if info.file == near.file:
                return info
        source = near.imports.get(name)
        if source is not None:
            for info in candidates:
                if info.file == source:
                    return info
            return None
    entry = release.entry_file(name)
    for info in candidates:
        if info.file == entry:
            return info
    return candidates[0] if len(candidates) == 1 and near is not None else None


def mro(release: Release, info: ClassInfo) -> list[ClassInfo]:
    """Depth-first, left-to-right bases within sglang's models (enough for these single-chain classes)."""
    out: list[ClassInfo] = []
    stack = [info]
    while stack:
        current = stack.pop(0)
        if any(c.name == current.name and c.file == current.file for c in out):
            continue
        out.append(current)
        bases: list[ClassInfo] = []
        for base in current.node.bases:
            if isinstance(base, ast.Name):
                found = find_class(release, base.id, current)
                if found is not None:
                    bases.append(found)
        stack = bases + stack
    return out


def find_method(release: Release, info: ClassInfo, name: str) -> tuple[ClassInfo, ast.FunctionDef] | None:
    for klass in mro(release, info):
        for node in klass.node.body:
            if isinstance(node, ast.FunctionDef) and node.name == name:
                return klass, node
    return None


def attribute_classes(release: Release, info: ClassInfo) -> dict[str, ClassInfo]:
    """`self.X = SomeClass(...)` (or `= self._init_model(...)` returning one) in __init__ along the MRO."""
    key = ("attrs", info.file, info.name)
    if key not in release.memo:
        release.memo[key] = _attribute_classes(release, info)
    result: dict[str, ClassInfo] = release.memo[key]
    return result


def _attribute_classes(release: Release, info: ClassInfo) -> dict[str, ClassInfo]:
    out: dict[str, ClassInfo] = {}
    for klass in reversed(mro(release, info)):
        init = next((n for n in klass.node.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None)
        if init is None:
            continue
        for node in ast.walk(init):
            if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
                continue
            for target in node.targets:
                if not (isinstance(target, ast.Attribute) and isinstance(target.value, ast.Name)
                        and target.value.id == "self"):
                    continue
                resolved = _called_class(release, info, klass, node.value)
                if resolved is not None:
                    out[target.attr] = resolved
    return out


def _called_class(release: Release, owner: ClassInfo, klass: ClassInfo, call: ast.Call) -> ClassInfo | None:
    func = call.func
    if isinstance(func, ast.Name):
        return find_class(release, func.id, klass)
    if isinstance(func, ast.Attribute) and isinstance(func.value, ast.Name) and func.value.id == "self":
        # `self.model_cls(...)` with a class attribute `model_cls = SomeModel` (deepseek_v2 from 0.5.6.post1)
        for klass_in_mro in mro(release, owner):
            for stmt in klass_in_mro.node.body:
                if isinstance(stmt, ast.Assign) and isinstance(stmt.value, ast.Name) and any(
                        isinstance(t, ast.Name) and t.id == func.attr for t in stmt.targets):
                    return find_class(release, stmt.value.id, klass_in_mro)
        method = find_method(release, owner, func.attr)
        if method is not None:
            mklass, mnode = method
            for node in ast.walk(mnode):
                if isinstance(node, ast.Return) and isinstance(node.value, ast.Call) and isinstance(
                        node.value.func, ast.Name):
                    return find_class(release, node.value.func.id, mklass)
    return None


# --- running a setter on stubs ----------------------------------------------------------------------


class Stub:
    """An object that records attribute writes and refuses reads of anything not provided."""

    def __init__(self, label: str, **attrs: Any) -> None:
        object.__setattr__(self, "_label", label)
        object.__setattr__(self, "_writes", {})
        for key, value in attrs.items():
            object.__setattr__(self, key, value)

    def __setattr__(self, key: str, value: Any) -> None:
        self._writes[key] = value
        object.__setattr__(self, key, value)

    def __getattr__(self, key: str) -> Any:
        raise AttributeError(f"stub {self._label} has no {key!r} (the setter reads something unexpected)")


def compile_method(node: ast.FunctionDef, file: str) -> Callable[..., Any]:
    """Our executable copy of one extracted method, annotations and decorators stripped."""
    clean = fx.strip_signature(node)
    module = ast.fix_missing_locations(ast.Module(body=[clean], type_ignores=[]))
    namespace: dict[str, Any] = {
        "__builtins__": __builtins__,
        # module-level helpers some setters call; single-rank answers (capture only runs on the last PP rank)
        "get_pp_group": lambda: Stub("pp_group", is_last_rank=True, is_first_rank=True, world_size=1),
        "get_parallel": lambda: Stub("parallel", pp_group=Stub("pp_group", is_last_rank=True, is_first_rank=True,
                                                             world_size=1)),
        "logger": Stub("logger", info=lambda *a, **k: None, warning=lambda *a, **k: None,
                       debug=lambda *a, **k: None),
    }
    exec(compile(module, f"<{file}:{node.name}>", "exec"), namespace)
    function: Callable[..., Any] = namespace[clean.name]
    return function


def build_stub(release: Release, info: ClassInfo, num_layers: int, depth: int = 0) -> Stub:
    config = Stub("config", num_hidden_layers=num_layers)
    object.__setattr__(config, "text_config", config)
    stub = Stub(
        info.name,
        config=config,
        pp_group=Stub("pp_group", is_last_rank=True, is_first_rank=True, world_size=1),
        capture_aux_hidden_states=False,
        layers_to_capture=[],
        layers=[Stub(f"layer{i}") for i in range(num_layers)],
        start_layer=0,
        end_layer=num_layers,
    )
    object.__setattr__(stub, "_info", info)
    key = ("setter", info.file, info.name)
    if key not in release.memo:
        found = find_method(release, info, SETTER)
        release.memo[key] = None if found is None else compile_method(found[1], found[0].file)
    if release.memo[key] is not None:
        object.__setattr__(stub, SETTER, release.memo[key].__get__(stub))
    if depth < 3:
        for attr, klass in attribute_classes(release, info).items():
            if klass.name != info.name:
                object.__setattr__(stub, attr, build_stub(release, klass, num_layers, depth + 1))
    return stub


@dataclass
class Observation:
    requested: list[int] | None
    marked: list[int] | None  # layer indices flagged `_is_layer_to_capture`, in index order
    error: str | None
    owner: ClassInfo | None
    owner_stub: Stub | None = None
    parent: ClassInfo | None = None  # the model holding the owner (its forward unpacks the owner's result)
    executed: fx.Executed | None = None  # the release's forward run on the configured stub


def _nodes(stub: Stub) -> Iterable[Stub]:
    yield stub
    for value in vars(stub).values():
        if isinstance(value, Stub) and value._label not in ("config", "pp_group") and not value._label.startswith(
                "layer"):
            yield from _nodes(value)


def observe(release: Release, info: ClassInfo, ids: list[int] | None, num_layers: int, takes_ids: bool) -> Observation:
    stub = build_stub(release, info, num_layers)
    setter = getattr(stub, SETTER)
    error = None
    try:
        setter(ids) if takes_ids else setter()
    except IndexError as exc:
        error = f"IndexError: {exc}"
    except Exception as exc:  # anything else means our stubs do not fit this release's code
        raise DerivationError(f"{release.version} {info.name}: setter raised {exc!r} on stubs (N={num_layers}, "
                              f"ids={ids})") from exc
    owners = [n for n in _nodes(stub) if "layers_to_capture" in n._writes]
    if len(owners) != 1:
        if error is not None and not owners:
            return Observation(None, None, error, None)
        raise DerivationError(f"{release.version} {info.name}: layers_to_capture written on {len(owners)} objects")
    owner = owners[0]
    marked = [i for i, layer in enumerate(owner.layers) if "_is_layer_to_capture" in layer._writes]
    parent = next((n._info for n in _nodes(stub) if any(v is owner for v in vars(n).values())), None)
    return Observation(list(owner.layers_to_capture), marked, error, owner._info, owner, parent)


# --- executing the forward on stand-ins (scripts/sglang_forward_exec.py) ------------------------------


class ForwardDriver:
    """The release's inner-model forward (and the outer model's), compiled once, run per observation."""

    def __init__(self, release: Release, owner: ClassInfo, outer: ClassInfo) -> None:
        self.release = release
        self.owner = owner
        found = find_method(release, owner, "forward")
        if found is None:
            raise fx.NotDrivable(f"{owner.name} has no forward")
        klass, node = found
        self.returns = fx.layer_returns(node)
        self.forward = fx.compile_function(node, f"{klass.file}:{klass.name}.forward", self.namespace(klass.file))
        self._methods: dict[str, Callable[..., Any] | None] = {}
        outer_found = find_method(release, outer, "forward")
        self.outer = None if outer_found is None else fx.compile_function(
            outer_found[1], f"{outer_found[0].file}:{outer_found[0].name}.forward", self.namespace(outer_found[0].file))

    def namespace(self, file: str) -> fx.ReleaseGlobals:
        key = ("namespace", file)
        if key not in self.release.memo:
            assert self.release.wheel is not None
            lazy: dict[str, Callable[[], Any]] = {}
            ns = fx.forward_namespace(lazy, fx.aux_module(self.release.wheel, self.release.memo), file)
            for name, fn in fx.module_function_nodes(self.release.tree(file)).items():
                lazy[name] = (lambda fn=fn, name=name: fx.compile_function(fn, f"{file}:{name}", ns))
            self.release.memo[key] = ns
        namespace: fx.ReleaseGlobals = self.release.memo[key]
        return namespace

    def method(self, name: str) -> Callable[..., Any] | None:
        """The owner's own method `name` (along its bases), compiled from the release."""
        if name not in self._methods:
            found = None if name.startswith("__") else find_method(self.release, self.owner, name)
            self._methods[name] = None if found is None else fx.compile_function(
                found[1], f"{found[0].file}:{found[0].name}.{name}", self.namespace(found[0].file))
        return self._methods[name]

    def run(self, obs: Observation, num_layers: int) -> fx.Executed:
        assert obs.owner_stub is not None
        trace = fx.Trace()
        layers = fx.make_layers(num_layers, self.returns, trace)
        for i in obs.marked or []:
            layers[i].__dict__["_is_layer_to_capture"] = True
        config = fx.Permissive("config")
        object.__setattr__(config, "num_hidden_layers", num_layers)
        attrs = {k: v for k, v in vars(obs.owner_stub).items()
                 if not k.startswith("_") and not isinstance(v, Stub) and k != "layers"}
        attrs.update(layers=layers, config=config, layers_to_capture=list(obs.owner_stub.layers_to_capture))
        inner = fx.run_forward(self.forward, attrs, num_layers, self.returns, self.method, trace)
        if inner.error is None and not inner.aux:
            return self.run_outer(inner)
        return inner

    def run_outer(self, inner: fx.Executed) -> fx.Executed:
        """The inner forward returned no aux hidden states: what the outer forward does with that."""
        if self.outer is None:
            raise fx.NotDrivable("no outer forward")
        bare = fx.stream(0)
        attrs: dict[str, Any] = {"model": lambda *a, **k: bare, "language_model": lambda *a, **k: bare,
                                 "capture_aux_hidden_states": True}
        out = fx.run_forward(self.outer, dict(attrs, layers=[]), 0, None, lambda name: None, fx.Trace(),
                             check_aux=False)
        return fx.Executed((), False, out.error, inner.in_layer)


# --- how the forward loop captures -----------------------------------------------------------------


@dataclass
class Mechanism:
    mode: str  # "membership" (`i in self.layers_to_capture` in the layer loop) or "marked" (layer flag)
    max_position: str
    embedding: str
    site: str
    collector: str = "list"  # "packer": one slot per requested position, all to be filled (else the forward fails)


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return (isinstance(node, ast.Attribute) and node.attr == attr and isinstance(node.value, ast.Name)
            and node.value.id == "self")


def mechanism(release: Release, owner: ClassInfo) -> Mechanism:
    """How the forward pass of the capture owner (the inner model) turns positions into captures.

    Known tests: `i in self.layers_to_capture` before layer i of the layer loop (positions 0..N-1),
    `i + 1 in ...` after layer i (1..N, gpt_oss 0.5.17-0.5.2x), `self.start_layer in ...` before the
    loop (0) and `self.end_layer in ...` after it (N, the final boundary); or layers flagged
    `_is_layer_to_capture` by the model-level setter. Anything else fails loudly.
    """
    membership: list[tuple[ast.FunctionDef, ast.For | None, ast.Compare, int]] = []  # offset of the loop var
    covered: set[str] = set()
    marked = False
    for klass in mro(release, owner):
        for fn in (n for n in klass.node.body if isinstance(n, ast.FunctionDef)):
            loops = [n for n in ast.walk(fn) if isinstance(n, ast.For) and isinstance(n.target, ast.Name)]
            for node in ast.walk(fn):
                if isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In) \
                        and _is_self_attr(node.comparators[0], "layers_to_capture"):
                    left = node.left
                    offset = 0
                    if isinstance(left, ast.BinOp) and isinstance(left.op, ast.Add) and isinstance(
                            left.right, ast.Constant) and left.right.value == 1:
                        left, offset = left.left, 1
                    if isinstance(left, ast.Name):
                        loop = next((lp for lp in loops if isinstance(lp.target, ast.Name)
                                     and lp.target.id == left.id and node in list(ast.walk(lp))), None)
                        if loop is None:
                            raise DerivationError(f"{release.version} {owner.name}: `{left.id} in layers_to_capture`"
                                                  " outside a loop")
                        membership.append((fn, loop, node, offset))
                        covered.add("loop" if offset == 0 else "loop+1")
                    elif _is_self_attr(left, "end_layer") and offset == 0:
                        covered.add("end")
                    elif _is_self_attr(left, "start_layer") and offset == 0:
                        membership.append((fn, None, node, 0))
                        covered.add("start")
                    else:
                        raise DerivationError(f"{release.version} {owner.name}: unknown capture test "
                                              f"{ast.unparse(node)}")
                if isinstance(node, ast.Constant) and node.value == "_is_layer_to_capture":
                    marked = True
                if isinstance(node, ast.Attribute) and node.attr == "_is_layer_to_capture":
                    marked = True
        if membership or marked:
            break
    if membership and marked:
        raise DerivationError(f"{release.version} {owner.name}: both membership and marked capture")
    if not membership and not marked:
        raise DerivationError(f"{release.version} {owner.name}: no capture site found")
    site = f"{owner.file}:{owner.name}"
    if marked:
        # decoder layers hand the list to LayerCommunicator.prepare_attn_and_capture_last_layer_outputs,
        # which captures the residual after prepare_attn (the embedding at layer 0)
        return Mechanism("marked", "N-1", "captured", site)
    if covered not in ({"loop"}, {"loop", "end"}, {"start", "loop+1"}):
        raise DerivationError(f"{release.version} {owner.name}: unknown combination of capture tests {covered}")
    embedding = "captured"
    for fn, loop, compare, offset in membership:
        if loop is not None:
            _check_loop_bounds(release, owner, fn, loop)
        if offset == 0:  # only a test that can see position 0 decides how the embedding is captured
            embedding = _embedding(release, fn, compare, embedding)
    top = "N" if covered & {"end", "loop+1"} else "N-1"
    collector = "packer" if any(_preallocates(fn) for fn, _, _, _ in membership) else "list"
    return Mechanism("membership", top, embedding, site, collector)


def _preallocates(fn: ast.FunctionDef) -> bool:
    """Whether the forward sizes its capture collector by the requested positions
    (`AuxHiddenStatePacker(len(self.layers_to_capture))`, sglang >= 0.5.17 DeepSeek), whose
    `finalize()` then requires every slot filled."""
    return any(isinstance(n, ast.Call) and n.args and ast.unparse(n.args[0]) == "len(self.layers_to_capture)"
               for n in ast.walk(fn))


def _check_loop_bounds(release: Release, owner: ClassInfo, fn: ast.FunctionDef, loop: ast.For) -> None:
    """The capture loop must run over all layers (start_layer..end_layer, one PP rank)."""
    it = loop.iter
    # deepseek_v2 loops over `normal_start_layer..normal_end_layer`, bound to start/end_layer unless
    # two-batch overlap is on (then later layers run in model_forward_maybe_tbo and capture nothing)
    first_bound: dict[str, str] = {}
    for n in ast.walk(fn):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            first_bound.setdefault(n.targets[0].id, ast.unparse(n.value))

    def bound(arg: ast.expr, attr: str) -> bool:
        return _is_self_attr(arg, attr) or (isinstance(arg, ast.Name) and first_bound.get(arg.id) == f"self.{attr}")

    ok = isinstance(it, ast.Call) and isinstance(it.func, ast.Name) and it.func.id == "range" and (
        (len(it.args) == 2 and bound(it.args[0], "start_layer") and bound(it.args[1], "end_layer"))
        or (len(it.args) == 1 and ast.unparse(it.args[0]) in ("len(self.layers)", "self.config.num_hidden_layers"))
    )
    if not ok:
        raise DerivationError(f"{release.version} {owner.name}: capture loop over {ast.unparse(it)}")


def _embedding(release: Release, fn: ast.FunctionDef, compare: ast.Compare, sofar: str) -> str:
    """Whether position 0 is captured: an unguarded `hidden_states + residual` at layer 0 is a TypeError."""
    parents = {child: parent for parent in ast.walk(fn) for child in ast.iter_child_nodes(parent)}
    parent = parents.get(compare)
    if isinstance(parent, ast.If) and parent.test is compare:
        body = ast.Module(body=parent.body, type_ignores=[])
        adds = [n for n in ast.walk(body) if isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add)
                and {ast.unparse(n.left), ast.unparse(n.right)} == {"hidden_states", "residual"}]
        guarded = "residual is None" in ast.unparse(body) or "residual is not None" in ast.unparse(body)
        if adds and not guarded:
            return "error"
        return sofar
    if isinstance(parent, ast.IfExp):
        # the list is handed to the layer (`capture_output=` / `capture_gathered=`): the layer boundary
        # captures before reading the residual at layer 0 when stage.py has `capture_before_read`
        return sofar if release.has_boundary_capture_before_read else "unverified"
    return "unverified"


# --- classification -------------------------------------------------------------------------------


def battery(n: int) -> list[list[int] | None]:
    h = n // 2
    return [
        None, [1, h - 1, n - 4], [2, h, n - 3], [-1, h - 1, n - 4], [0, h - 1, n - 4], [1, h - 1, n - 1],
        [1, h - 1, n], [2, h, n], [n - 4, 1, h - 1], [1, 1, h - 1], [h - 1, 1, n - 4], [], [-2, 3, n - 2],
        [n - 1], [n + 1], [n], [-n - 2, 1, 2], [5, 1, 3],
    ]


def fit_formula(values: dict[int, int]) -> str:
    if len(set(values.values())) == 1:
        return str(next(iter(values.values())))
    for base, expr in ((lambda n: n, "N"), (lambda n: n // 2, "N//2")):
        offsets = {v - base(n) for n, v in values.items()}
        if len(offsets) == 1:
            b = offsets.pop()
            return expr if b == 0 else f"{expr}{b:+d}"
    raise DerivationError(f"no formula fits {values}")


# One release's behaviour is a CaptureRule whose release range is not known yet (first = last = "");
# build_table groups equal behaviours of consecutive releases and fills the range in.
Behaviour = CaptureRule


def derive(release: Release, architecture: str) -> Behaviour:
    info = find_class(release, architecture)
    if info is None:
        if release.class_infos(architecture):
            raise DerivationError(f"{release.version}: {architecture} is defined but not registered in EntryClass")
        return Behaviour(architecture, "", "", "", False, note="class not in this release")
    found = find_method(release, info, SETTER)
    if found is None:
        return Behaviour(architecture, "", "", f"{info.file}:{info.name}", False, note=f"{architecture} has no {SETTER}")
    where, setter_node = found
    source = f"{where.file}:{where.name}.{SETTER}"
    params = [a.arg for a in setter_node.args.args][1:]
    takes_ids = bool(params)

    defaults: list[dict[int, int]] = []
    observations: dict[tuple[int, tuple[int, ...] | None], Observation] = {}
    owner: ClassInfo | None = None
    for n in LAYER_COUNTS:
        for ids in battery(n):
            obs = observe(release, info, ids, n, takes_ids)
            observations[(n, None if ids is None else tuple(ids))] = obs
            owner = owner or obs.owner
            if ids is None:
                if obs.requested is None:
                    raise DerivationError(f"{release.version} {architecture}: default failed: {obs.error}")
                if not defaults:
                    defaults = [{} for _ in obs.requested]
                if len(defaults) != len(obs.requested):
                    raise DerivationError(f"{release.version} {architecture}: default length varies with N")
                for slot, value in zip(defaults, obs.requested):
                    slot[n] = value
    if owner is None:
        raise DerivationError(f"{release.version} {architecture}: no capture owner found")
    default = tuple(fit_formula(d) for d in defaults)
    mech = mechanism(release, owner)  # the reading: fallback, and what a stand-in layer cannot show
    note = "" if takes_ids else "setter takes no ids: the drafter's ids are ignored"
    base = Behaviour(architecture, "", "", source, True, default, None, note=note, capture_site=mech.site)
    parent = next((o.parent for o in observations.values() if o.parent is not None), info)
    try:
        driver = ForwardDriver(release, owner, parent)
        for (n, _), obs in observations.items():
            if obs.owner_stub is not None and obs.error is None:
                obs.executed = driver.run(obs, n)
        for (n, ids), obs in observations.items():
            if ids is None and (obs.executed is None or obs.executed.error or not obs.executed.aux):
                raise fx.NotDrivable("the forward fails on stand-ins for the default positions: "
                                     f"{obs.executed.error if obs.executed else obs.error}")
    except fx.NotDrivable as exc:
        return _derive_read(release, base, observations, mech, f"read: {exc}")
    return _derive_executed(release, base, observations, mech)


def execute_ids(release: Release, architecture: str, ids: list[int] | None, num_layers: int) -> Observation:
    """Run the release's setter and then its forward on stand-ins for one id list (raises fx.NotDrivable)."""
    info = find_class(release, architecture)
    found = None if info is None else find_method(release, info, SETTER)
    if info is None or found is None:
        raise DerivationError(f"{release.version} {architecture}: no {SETTER}")
    obs = observe(release, info, ids, num_layers, bool(found[1].args.args[1:]))
    if obs.owner_stub is not None and obs.owner is not None and obs.error is None:
        key = ("driver", obs.owner.file, obs.owner.name)
        if key not in release.memo:
            release.memo[key] = ForwardDriver(release, obs.owner, obs.parent or info)
        obs.executed = release.memo[key].run(obs, num_layers)
    return obs


FIELDS = ("max_position", "beyond", "negative", "embedding", "unmatched", "nothing_captured")
CHOICES: dict[str, tuple[str | None, ...]] = {
    "max_position": ("N-1", "N"), "beyond": ("dropped", "error"), "negative": ("dropped", "wrap"),
    "embedding": ("error", "captured"), "unmatched": (None, "error"), "nothing_captured": (None, "error"),
}


def _read_values(mech: Mechanism) -> dict[str, str | None]:
    """What reading the code says for each field (the method before forwards were executed)."""
    marked = mech.mode == "marked"
    return {"max_position": mech.max_position, "beyond": "error" if marked else "dropped",
            "negative": "wrap" if marked else "dropped", "embedding": mech.embedding,
            "unmatched": "error" if mech.collector == "packer" else None, "nothing_captured": "error"}


def _derive_read(release: Release, base: Behaviour, observations: dict[tuple[int, tuple[int, ...] | None], Observation],
                 mech: Mechanism, method: str) -> Behaviour:
    """The forward could not be driven: fields from reading the code, the rule from the setter runs."""
    read = _read_values(mech)
    candidates = [name for name in EXPLICIT_RULES
                  if all(_agrees(replace(base, explicit=name, **read), key, obs, mech)  # type: ignore[arg-type]
                         for key, obs in observations.items())]
    _one(release, base, candidates, observations)
    return replace(base, explicit=candidates[0], method=method, **read)  # type: ignore[arg-type]


def _derive_executed(release: Release, base: Behaviour,
                     observations: dict[tuple[int, tuple[int, ...] | None], Observation], mech: Mechanism) -> Behaviour:
    """Every combination of named rule and field values that reproduces every executed outcome; fields
    the executions leave open (or that a stand-in delivered, such as position 0 inside a layer) are read."""
    read = _read_values(mech)
    in_layer = any(o.executed is not None and o.executed.in_layer for o in observations.values())
    choices = dict(CHOICES)
    if in_layer:
        choices["embedding"] = (read["embedding"],)
    explicit = [name for name in EXPLICIT_RULES if all(
        _requested_agrees(replace(base, explicit=name, max_position="N"), key, obs) for key, obs in observations.items())]
    survivors: list[Behaviour] = []
    for name in explicit:
        for values in itertools.product(*(choices[f] for f in FIELDS)):
            rule = replace(base, explicit=name, **dict(zip(FIELDS, values)))  # type: ignore[arg-type]
            if all(_agrees_executed(rule, key, obs) for key, obs in observations.items()):
                survivors.append(rule)
    _one(release, base, sorted({r.explicit or "" for r in survivors}), observations)
    decided: dict[str, str | None] = {}
    open_fields: list[str] = []
    for f in FIELDS:
        seen = {getattr(r, f) for r in survivors}
        if len(seen) == 1 and not (f == "embedding" and in_layer):
            decided[f] = seen.pop()
            continue
        if read[f] not in seen:
            raise DerivationError(f"{release.version} {base.architecture}: reading says {f}={read[f]}, the executions "
                                  f"allow only {sorted(map(str, seen))}")
        decided[f] = read[f]
        open_fields.append(f)
    method = "executed" + (f"; read: {', '.join(open_fields)}" if open_fields else "")
    return replace(base, explicit=survivors[0].explicit, method=method, **decided)  # type: ignore[arg-type]


def _one(release: Release, base: Behaviour, candidates: Sequence[str],
         observations: dict[tuple[int, tuple[int, ...] | None], Observation]) -> None:
    if len(candidates) != 1:
        sample = {f"N={k[0]} ids={list(k[1]) if k[1] is not None else None}": (o.requested, o.error, o.executed)
                  for k, o in list(observations.items())[:20]}
        raise DerivationError(
            f"{release.version} {base.architecture} ({base.source}): {len(candidates)} named rules reproduce the real "
            f"outputs ({list(candidates)}); add a rule to specctl/engines/sglang/capture.py. Sample: {sample}")


def _requested_agrees(rule: CaptureRule, key: tuple[int, tuple[int, ...] | None], obs: Observation) -> bool:
    """The named rule gives the setter's output (or the setter's IndexError)."""
    n, ids = key
    predicted = capture(rule, ids, n)
    if obs.requested is None:
        return True  # the setter raised before writing: decided with the fields
    return list(predicted.requested) == obs.requested


def _error_kind(error: str) -> str:
    if error.startswith("IndexError"):
        return "index"
    if error.startswith("TypeError"):
        return "embedding"
    if error.startswith("no requested position") or error.startswith("ValueError"):
        return "nothing"
    if error.startswith("the forward preallocates") or "aux hidden states" in error:
        return "unmatched"
    return error


def _agrees_executed(rule: CaptureRule, key: tuple[int, tuple[int, ...] | None], obs: Observation) -> bool:
    """The rule predicts what the setter and then the release's forward really did for these ids."""
    n, ids = key
    predicted = capture(rule, ids, n)
    if obs.requested is None or obs.error is not None:  # the setter raised
        return predicted.error is not None and predicted.error.startswith("IndexError")
    if list(predicted.requested) != obs.requested:
        return False
    real = obs.executed
    assert real is not None
    if predicted.error is not None or real.error is not None:
        return (predicted.error is not None and real.error is not None
                and _error_kind(predicted.error) == _error_kind(real.error))
    return real.aux == bool(predicted.captured) and list(real.captured) == list(predicted.captured)


def _agrees(rule: CaptureRule, key: tuple[int, tuple[int, ...] | None], obs: Observation, mech: Mechanism) -> bool:
    n, ids = key
    predicted = capture(rule, ids, n)
    if obs.requested is None:  # the setter itself raised before recording anything
        return predicted.error is not None and predicted.error.startswith("IndexError")
    if list(predicted.requested) != obs.requested:
        return False
    if mech.mode == "marked":
        # the real outcome comes from running the code: flagged layers, or the setter's IndexError
        if obs.error is not None:
            return predicted.error is not None and predicted.error.startswith("IndexError")
        if not obs.marked and rule.nothing_captured == "error":
            return predicted.error is not None and predicted.error.startswith("no requested position")
        return predicted.error is None and list(predicted.captured) == sorted(set(obs.marked or []))
    if obs.error is not None:
        return False
    top = n if mech.max_position == "N" else n - 1
    loop = sorted({p for p in obs.requested if 0 <= p <= top})
    if not loop and rule.nothing_captured == "error":
        return predicted.error is not None and predicted.error.startswith("no requested position")
    if mech.collector == "packer" and len(loop) != len(obs.requested):  # a slot left empty: finalize() raises
        return predicted.error is not None and "capture slots" in predicted.error
    if predicted.error is not None:
        return predicted.error.startswith("TypeError") and 0 in loop and mech.embedding == "error"
    return list(predicted.captured) == loop


# --- the table --------------------------------------------------------------------------------------


def build_table(releases: Sequence[str], derived: dict[str, dict[str, Behaviour]],
                architectures: Sequence[str]) -> dict[str, Any]:
    rows: list[dict[str, Any]] = []
    for arch in architectures:
        start = 0
        for i in range(1, len(releases) + 1):
            if i == len(releases) or derived[releases[i]][arch] != derived[releases[start]][arch]:
                rows.append(replace(derived[releases[start]][arch], first=releases[start], last=releases[i - 1]).to_json())
                start = i
    return {
        "generated_by": "scripts/gen_sglang_conventions.py",
        "engine": "sglang",
        "position": "p = residual stream entering decoder layer p; 0 = embedding; canonical layer L = L+1",
        "releases": list(releases),
        "rows": rows,
    }


def derive_release(cache: Path, version: str, offline: bool, architectures: Sequence[str]) -> dict[str, Behaviour]:
    wheel = cached_wheel(cache, version)
    if wheel is None:
        if offline:
            raise RuntimeError(f"sglang {version} is not in the cache {cache} (--offline)")
        wheel = download(cache, version)
    release = read_release(wheel, version)
    return {arch: derive(release, arch) for arch in architectures}


def generate(releases: Sequence[str], cache: Path, offline: bool, architectures: Sequence[str] = ARCHITECTURES,
             jobs: int = 2) -> dict[str, Any]:
    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        results = list(pool.map(lambda v: derive_release(cache, v, offline, architectures), releases))
    return build_table(releases, dict(zip(releases, results)), architectures)


def restrict(table: dict[str, Any], releases: Sequence[str], architectures: Sequence[str]) -> dict[str, Any]:
    """The shipped table cut down to a sample of releases (for --check and tests on a sample)."""
    from specctl.engines.sglang.capture import ConventionTable

    shipped = ConventionTable.from_json(table)
    derived: dict[str, dict[str, Behaviour]] = {}
    for version in releases:
        derived[version] = {}
        for arch in architectures:
            row = shipped.rule_for(version, arch)
            if row is None:
                raise KeyError(f"shipped table has no row for {arch} at {version}")
            derived[version][arch] = replace(row, first="", last="")
    return build_table(releases, derived, architectures)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--releases", help="comma-separated sample of releases (default: all >= 0.4.0)")
    parser.add_argument("--architectures", help="comma-separated architectures (default: the built-in list)")
    parser.add_argument("--check", action="store_true", help="compare with the shipped table; exit 1 on a difference")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE, help=f"wheel cache (default {DEFAULT_CACHE})")
    parser.add_argument("--offline", action="store_true", help="use only wheels already in the cache")
    parser.add_argument("--output", type=Path, default=SGLANG_TABLE_PATH)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    cache = args.cache.expanduser()
    architectures = args.architectures.split(",") if args.architectures else list(ARCHITECTURES)
    if args.releases:
        releases = sorted(args.releases.split(","), key=version_key)
    else:
        releases = list_releases_cached(cache) if args.offline else list_releases_online()
    try:
        table = generate(releases, cache, args.offline, architectures, args.jobs)
    except DerivationError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.check:
        shipped = json.loads(args.output.read_text(encoding="utf-8"))
        full = not args.releases and not args.architectures
        expected = shipped if full else restrict(shipped, releases, architectures)
        if full and shipped["releases"] != releases:
            print(f"releases differ: shipped {len(shipped['releases'])}, now {len(releases)}: "
                  f"new {sorted(set(releases) - set(shipped['releases']), key=version_key)}", file=sys.stderr)
            return 1
        if expected["rows"] != table["rows"]:
            want = {json.dumps(r, sort_keys=True) for r in expected["rows"]}
            got = {json.dumps(r, sort_keys=True) for r in table["rows"]}
            for line in sorted(want - got):
                print(f"- shipped {line}", file=sys.stderr)
            for line in sorted(got - want):
                print(f"+ derived {line}", file=sys.stderr)
            return 1
        print(f"ok: {len(releases)} releases x {len(architectures)} architectures match the shipped table")
        return 0
    args.output.parent.mkdir(parents=True, exist_ok=True)
    args.output.write_text(json.dumps(table, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {args.output} ({len(table['rows'])} rows, {len(releases)} releases)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
