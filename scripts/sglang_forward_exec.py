"""Execute a release's own capture path (its inner model's `forward`) on CPU with stand-in layers.

`scripts/gen_sglang_conventions.py` runs each release's setter on stubs; this module then runs the
same release's inner-model `forward` (compiled from the wheel's source at run time, never copied
into this repository) on the stub that setter configured, to see which positions really come back
as aux hidden states, or what the forward raises.

How positions are made visible: stand-in decoder layer i returns a stream worth i+1 (split in two
halves, hidden and residual, where the loop carries a residual), and the embedding returns zeros
with residual None, so a captured `hidden_states + residual` is worth its position and position 0
added to a None residual raises the release's own TypeError. Module globals of the release resolve
to real `torch`, the release's own `aux_hidden_states` classes (its `AuxHiddenStatePacker`), its
own module-level functions, and permissive stand-ins for everything else (falsy, callable, usable
as a context manager: the CUDA-free, single-rank, TBO-off, non-idle path).

Where the forward hands the collector to the decoder layer (`captured_last_layer_outputs=`,
`capture_output=`), the stand-in layer delivers its input stream to it: the loop's choice of
layers and the collector are executed, what the real layer does at position 0 is not (the
generator reads that from the code instead).
"""

from __future__ import annotations

import ast
import builtins
import contextlib
import traceback
import zipfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

TOKENS = 3  # not 2: a bare [tokens, hidden] tensor unpacked as (hidden, aux) must fail as it does in sglang
HIDDEN = 4
AUX_MODULE = "sglang/srt/layers/aux_hidden_states.py"
RELEASE_FRAME = "<sglang/"  # filename prefix of code compiled from a wheel


class NotDrivable(RuntimeError):
    """The forward of this release cannot be driven on the stand-ins (the generator then reads it)."""


class Permissive:
    """Stand-in for any release name we do not model: callable, attribute-rich, falsy, a context manager."""

    def __init__(self, name: str = "?") -> None:
        object.__setattr__(self, "_name", name)

    def __repr__(self) -> str:
        return f"<stand-in {self._name}>"

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        return Permissive(f"{self._name}.{key}")

    def __setattr__(self, key: str, value: Any) -> None:
        pass

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return Permissive(f"{self._name}()")

    def __bool__(self) -> bool:
        return False

    def __enter__(self) -> Any:
        return self

    def __exit__(self, *exc: Any) -> bool:
        return False

    def __iter__(self) -> Any:
        return iter(())

    def __len__(self) -> int:
        return 0

    def __getitem__(self, key: Any) -> Any:
        return Permissive(f"{self._name}[]")

    def __eq__(self, other: object) -> bool:
        return other is self

    def __hash__(self) -> int:
        return id(self)

    def __lt__(self, other: Any) -> bool:
        return False

    __le__ = __gt__ = __ge__ = __lt__

    def _arith(self, *other: Any) -> Any:
        return Permissive(f"{self._name}(op)")

    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = __floordiv__ = _arith


class ReleaseGlobals(dict[str, Any]):
    """Module globals of compiled release code: builtins, then known names, then a permissive stand-in."""

    def __missing__(self, key: str) -> Any:
        if hasattr(builtins, key):
            return getattr(builtins, key)
        lazy = self.get("__lazy__")
        if lazy is not None and key in lazy:
            value = lazy[key]()
            self[key] = value
            return value
        return Permissive(key)


def strip_signature(node: ast.FunctionDef) -> ast.FunctionDef:
    """A copy of a function without decorators and annotations: they name release types we do not load."""
    clean = ast.parse(ast.unparse(node)).body[0]
    assert isinstance(clean, ast.FunctionDef)
    clean.decorator_list = []
    clean.returns = None
    for arg in clean.args.args + clean.args.kwonlyargs + clean.args.posonlyargs:
        arg.annotation = None
    if clean.args.vararg:
        clean.args.vararg.annotation = None
    if clean.args.kwarg:
        clean.args.kwarg.annotation = None
    return clean


def compile_function(node: ast.FunctionDef, label: str, namespace: ReleaseGlobals) -> Callable[..., Any]:
    """The release's own function, compiled into `namespace` (its stand-in module globals)."""
    clean = strip_signature(node)
    module = ast.fix_missing_locations(ast.Module(body=[clean], type_ignores=[]))
    local: dict[str, Any] = {}
    exec(compile(module, f"<{label}>", "exec"), namespace, local)
    function: Callable[..., Any] = local[clean.name]
    return function


# --- the release's aux_hidden_states module (AuxHiddenStatePacker, AuxHiddenStateList) ----------------


def aux_module(wheel: Path, memo: dict[Any, Any]) -> dict[str, Any]:
    """Names defined by the release's own `sglang/srt/layers/aux_hidden_states.py` (empty before it existed)."""
    key = ("aux_module", str(wheel))
    if key not in memo:
        names: dict[str, Any] = {}
        with zipfile.ZipFile(wheel) as archive:
            if AUX_MODULE in archive.namelist():
                source = archive.read(AUX_MODULE).decode("utf-8-sig")
                namespace: dict[str, Any] = {"__name__": "sglang_release_aux", "__builtins__": builtins}
                exec(compile(source, f"<{AUX_MODULE}>", "exec"), namespace)
                names = {k: v for k, v in namespace.items() if not k.startswith("__")}
        memo[key] = names
    result: dict[str, Any] = memo[key]
    return result


# --- stand-ins the forward runs on -------------------------------------------------------------------


@dataclass
class Trace:
    """What one forward did: which positions stand-ins delivered to a collector (not the release's code)."""

    layer_captures: list[int] = field(default_factory=list)
    boundary_captures: list[int] = field(default_factory=list)


def stream(position: float) -> torch.Tensor:
    return torch.full((TOKENS, HIDDEN), float(position))


def _deliver(collector: Any, value: torch.Tensor) -> None:
    if hasattr(collector, "append"):
        collector.append(value)
    elif callable(collector):
        collector(value)
    else:
        raise NotDrivable(f"cannot deliver a capture to {collector!r}")


class StandInLayer:
    """Decoder layer i: returns the stream entering layer i+1; delivers its input when handed a collector.

    Accepts attribute writes (setters flag `_is_layer_to_capture`); private names it was not given are
    missing (so `getattr(layer, "_is_layer_to_capture", False)` is False), public ones are stand-ins.
    """

    def __init__(self, index: int, returns: tuple[str, ...] | None, trace: Trace) -> None:
        self.__dict__.update(_index=index, _returns=returns, _trace=trace)

    def __getattr__(self, key: str) -> Any:
        if key.startswith("_"):
            raise AttributeError(key)
        return Permissive(f"layers[{self._index}].{key}")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        hidden = kwargs.get("hidden_states", args[1] if len(args) > 1 else None)
        residual = kwargs.get("residual", args[3] if len(args) > 3 and (args[3] is None or isinstance(
            args[3], torch.Tensor)) else None)
        if not isinstance(hidden, torch.Tensor):
            raise NotDrivable(f"layer {self._index} called without a hidden-states tensor")
        collectors = [v for k, v in kwargs.items() if "capture" in k and v is not None]
        if collectors:
            value = hidden if residual is None else hidden + residual
            for collector in collectors:
                _deliver(collector, value.clone())
            self._trace.layer_captures.append(self._index)
        out = self._index + 1
        if self._returns is None:
            return stream(out)
        values = {"hidden_states": stream(out / 2), "residual": stream(out / 2)}
        if "residual" not in self._returns:
            values["hidden_states"] = stream(out)
        return tuple(values.get(name) for name in self._returns)


class ResidualBatch:
    """Stand-in for layer_boundary's `residual_batch` (the stream lives in hidden_states alone there)."""

    def __init__(self, trace: Trace) -> None:
        self._trace = trace

    def start(self, *args: Any, **kwargs: Any) -> None:
        return None

    def complete_output(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
        return hidden

    def snapshot(self, hidden: Any, *args: Any, **kwargs: Any) -> Any:
        return hidden.clone()

    def final_norm(self, hidden: Any, *args: Any, capture: Any = None, **kwargs: Any) -> Any:
        if capture is not None:
            _deliver(capture, hidden.clone())
            self._trace.boundary_captures.append(int(hidden.flatten()[0].item()))
        return hidden

    def __getattr__(self, key: str) -> Any:
        return Permissive(f"residual_batch.{key}")


class ForwardSelf:
    """`self` of the forward: the attributes the setter configured, the release's own methods, stand-ins."""

    def __init__(self, attrs: dict[str, Any], methods: Callable[[str], Callable[..., Any] | None]) -> None:
        self.__dict__.update(attrs)
        self.__dict__["_methods"] = methods

    def __getattr__(self, key: str) -> Any:
        if key.startswith("__"):
            raise AttributeError(key)
        method = self._methods(key)
        if method is not None:
            return method.__get__(self)
        return Permissive(f"self.{key}")


# --- one execution --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Executed:
    """Outcome of one forward: positions returned as aux hidden states (in order), or the exception.

    `aux` False: the forward returned no aux hidden states at all (it captured nothing).
    `in_layer`: some capture was delivered by a stand-in layer (the layer's own code was not run).
    """

    captured: tuple[int, ...] = ()
    aux: bool = True
    error: str | None = None  # "TypeName: message"
    in_layer: bool = False


def layer_returns(forward: ast.FunctionDef) -> tuple[str, ...] | None:
    """How the forward unpacks a decoder layer's result: names of the tuple, or None for one value."""
    for node in ast.walk(forward):
        if not (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)):
            continue
        func = node.value.func
        is_layer = (isinstance(func, ast.Name) and func.id == "layer") or (
            isinstance(func, ast.Subscript) and ast.unparse(func.value) == "self.layers")
        if not is_layer:
            continue
        target = node.targets[0]
        if isinstance(target, ast.Tuple):
            return tuple(ast.unparse(e) for e in target.elts)
        return None
    raise NotDrivable("no decoder-layer call in the forward")


def decode(aux: Any) -> tuple[int, ...]:
    """Positions encoded in what the forward returned as aux hidden states (list or packed tensor)."""
    if isinstance(aux, torch.Tensor):
        if aux.shape[-1] % HIDDEN:
            raise NotDrivable(f"packed aux of width {aux.shape[-1]}")
        chunks = list(aux.split(HIDDEN, dim=-1))
    elif isinstance(aux, (list, tuple)):
        chunks = list(aux)
    else:
        raise NotDrivable(f"aux hidden states of type {type(aux).__name__}")
    out: list[int] = []
    for chunk in chunks:
        values = chunk.flatten().unique()
        if len(values) != 1 or float(values[0]) != int(values[0]):
            raise NotDrivable(f"captured value {values.tolist()} is not one position")
        out.append(int(values[0]))
    return tuple(out)


def run_forward(forward: Callable[..., Any], self_attrs: dict[str, Any], num_layers: int,
                returns: tuple[str, ...] | None, methods: Callable[[str], Callable[..., Any] | None],
                trace: Trace, check_aux: bool = True) -> Executed:
    """Call the release's forward once on stand-ins and decode its aux hidden states
    (`check_aux` False: an outer forward, only whether it raises matters)."""
    layers = self_attrs["layers"]
    pp_group = Permissive("pp_group")
    object.__setattr__(pp_group, "is_first_rank", True)
    object.__setattr__(pp_group, "is_last_rank", True)
    object.__setattr__(pp_group, "world_size", 1)
    attrs = dict(STAND_IN_ATTRS)
    attrs.update(self_attrs, layers=layers, start_layer=0, end_layer=num_layers, pp_group=pp_group,
                 embed_tokens=lambda *a, **k: stream(0), norm=_norm)
    forward_batch = Permissive("forward_batch")
    for key, value in (("can_run_tbo", False), ("aux_hidden_states_buffer", None), ("input_embeds", None)):
        object.__setattr__(forward_batch, key, value)
    # the globals the forward was compiled into (an inherited forward's are its own file's, not the
    # owner's): else it reads a stand-in left by an earlier architecture's run, or none
    forward.__globals__["residual_batch"] = ResidualBatch(trace)
    this = ForwardSelf(attrs, methods)
    input_ids = torch.zeros(TOKENS, dtype=torch.long)
    positions = torch.arange(TOKENS)
    try:
        result = forward(this, input_ids, positions, forward_batch)
    except NotDrivable:
        raise
    except Exception as exc:
        frames = traceback.extract_tb(exc.__traceback__)
        where = frames[-1].filename if frames else ""
        if not where.startswith(RELEASE_FRAME):
            raise NotDrivable(f"a stand-in failed: {exc!r} at {where}:{frames[-1].lineno if frames else 0}") from exc
        return Executed(error=f"{type(exc).__name__}: {exc}", in_layer=bool(trace.layer_captures))
    if isinstance(result, torch.Tensor) or not check_aux:
        return Executed(aux=False, in_layer=bool(trace.layer_captures))
    if isinstance(result, tuple) and len(result) == 2:
        return Executed(decode(result[1]), in_layer=bool(trace.layer_captures))
    raise NotDrivable(f"forward returned {type(result).__name__}")


# attributes a plain config leaves None (a stand-in there would switch on optional code paths)
STAND_IN_ATTRS: dict[str, Any] = {"llama_4_scaling_config": None}


def _norm(hidden: Any, residual: Any = None, *args: Any, **kwargs: Any) -> Any:
    """Final norm stand-in: sglang's RMSNorm returns (out, residual) when given a residual."""
    return hidden if residual is None else (hidden, residual)


def make_layers(num_layers: int, returns: tuple[str, ...] | None, trace: Trace) -> list[StandInLayer]:
    return [StandInLayer(i, returns, trace) for i in range(num_layers)]


def forward_namespace(module_functions: dict[str, Callable[[], Any]], aux_names: dict[str, Any],
                      label: str) -> ReleaseGlobals:
    """Stand-in module globals for one release file: torch, the release's aux classes and functions."""
    namespace = ReleaseGlobals(__name__=label, __builtins__=builtins, torch=torch,
                               nullcontext=contextlib.nullcontext, contextlib=contextlib)
    namespace.update(aux_names)
    namespace["__lazy__"] = module_functions
    return namespace


def module_function_nodes(tree: ast.Module) -> dict[str, ast.FunctionDef]:
    return {n.name: n for n in tree.body if isinstance(n, ast.FunctionDef)}


def positions_of(values: Sequence[int]) -> list[int]:
    return [int(v) for v in values]
