"""The engine registry: engine names map to the one module that knows that engine."""

from __future__ import annotations

from functools import cache

from specctl.engines.base import (
    ConfigOverride,
    Convention,
    Engine,
    HttpContract,
    LaunchArgv,
    LaunchSpec,
    ParseAnswer,
    ProbeDisagreement,
    ProbeReport,
    SpecRewrite,
)
from specctl.errors import EngineError

__all__ = [
    "ConfigOverride",
    "Convention",
    "Engine",
    "HttpContract",
    "LaunchArgv",
    "LaunchSpec",
    "ParseAnswer",
    "ProbeDisagreement",
    "ProbeReport",
    "SpecRewrite",
    "engine_names",
    "get_engine",
]

# name -> "module:attribute"; imported lazily so one engine's data never loads for another
_REGISTRY = {"sglang": "specctl.engines.sglang:SGLANG", "reference": "specctl.engines.reference.engine:REFERENCE"}


def engine_names() -> list[str]:
    return sorted(_REGISTRY)


@cache
def get_engine(name: str) -> Engine:
    """The engine object registered under `name`."""
    if name not in _REGISTRY:
        raise EngineError(f"unknown engine {name!r}", engine=name, fix=f"use one of: {', '.join(engine_names())}")
    module_name, attribute = _REGISTRY[name].split(":")
    import importlib

    engine: Engine = getattr(importlib.import_module(module_name), attribute)
    return engine
