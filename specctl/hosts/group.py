"""Running one function over many hosts in parallel, with a per-host outcome (fabric's GroupResult).
Each runs in the caller's context, so the hosts share the command's connections (hosts/connections.py)."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextvars import copy_context
from dataclasses import dataclass, field
from time import monotonic
from typing import Generic, TypeVar

from specctl.hosts.inventory import HostSpec

T = TypeVar("T")
X = TypeVar("X")


@dataclass(frozen=True)
class GroupResult(Generic[T]):
    """Each host's result or the exception it raised, in inventory order, and how long it took."""

    results: dict[str, T]
    errors: dict[str, BaseException]
    seconds: dict[str, float] = field(default_factory=dict)

    @property
    def failed(self) -> list[str]:
        return list(self.errors)

    @property
    def succeeded(self) -> list[str]:
        return list(self.results)


def run_group(hosts: Sequence[HostSpec], fn: Callable[[HostSpec], T], *, max_workers: int = 16) -> GroupResult[T]:
    results: dict[str, T] = {}
    errors: dict[str, BaseException] = {}
    seconds: dict[str, float] = {}

    def timed(host: HostSpec) -> T:
        began = monotonic()
        try:
            return fn(host)
        finally:
            seconds[host.name] = monotonic() - began

    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(hosts)))) as pool:
        futures = {host.name: pool.submit(copy_context().run, timed, host) for host in hosts}
        for name, future in futures.items():
            try:
                results[name] = future.result()
            except Exception as exc:  # noqa: BLE001 - recorded per host, reported by the caller
                errors[name] = exc
    return GroupResult(results, errors, seconds)


def parallel(items: Mapping[str, X], fn: Callable[[X], T], *, max_workers: int = 16) -> dict[str, T]:
    """fn over every item at once, by name; the first exception (in the mapping's order) is raised."""
    if not items:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(max_workers, len(items)))) as pool:
        futures = {name: pool.submit(copy_context().run, fn, item) for name, item in items.items()}
        return {name: future.result() for name, future in futures.items()}
