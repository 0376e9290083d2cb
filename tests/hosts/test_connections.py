"""A command's connections: one transport per host, shared across the command's threads, every one
closed when the scope ends, and nothing shared or closed outside a scope."""

from __future__ import annotations

import contextvars
import threading

from specctl.hosts.connections import close_at_end, held, shared
from specctl.hosts.group import run_group
from specctl.hosts.inventory import HostSpec
from specctl.hosts.transport import Completed, Transport


class Counted:
    """Transports that count how often they were made and closed."""

    def __init__(self) -> None:
        self.made: list[Transport] = []
        self.closed: list[str] = []

    def make(self, name: str = "h0") -> Transport:
        transport = Transport(
            name, "127.0.0.1", lambda *a, **k: Completed(0, b"", ""), close=lambda: self.closed.append(name)
        )
        self.made.append(transport)
        return transport


def test_a_host_is_one_transport_for_the_whole_scope_and_closed_at_its_end() -> None:
    counted = Counted()
    with held():
        first = shared("h0", counted.make)
        assert shared("h0", counted.make) is first
        assert shared("h1", lambda: counted.make("h1")) is not first
        assert counted.closed == []
    assert counted.closed == ["h0", "h1"] and len(counted.made) == 2


def test_outside_a_scope_every_call_makes_its_own_and_nothing_is_closed() -> None:
    counted = Counted()

    def outside() -> None:  # a context of its own: the suite holds every test in a scope (conftest.py)
        assert shared("h0", counted.make) is not shared("h0", counted.make)
        close_at_end(counted.make())

    contextvars.Context().run(outside)
    assert counted.closed == [] and len(counted.made) == 3


def test_a_transport_made_inside_a_scope_is_closed_once_with_it() -> None:
    counted = Counted()
    with held():
        transport = close_at_end(counted.make())
        close_at_end(transport)
        assert shared("h0", lambda: close_at_end(transport)) is transport  # registered twice, closed once
    assert counted.closed == ["h0"]


def test_the_hosts_of_a_thread_pool_share_the_callers_connections() -> None:
    hosts = [HostSpec(f"h{i}", "/srv", None, None, {}) for i in range(4)]
    counted = Counted()
    seen: dict[str, int] = {}
    lock = threading.Lock()

    def reach(host: HostSpec) -> Transport:
        transport = shared(host.name, lambda: counted.make(host.name))
        with lock:
            seen[host.name] = id(transport)
        return transport

    with held():
        outer = {h.name: shared(h.name, lambda h=h: counted.make(h.name)) for h in hosts}  # type: ignore[misc]
        group = run_group(hosts, reach)
        assert {name: id(t) for name, t in group.results.items()} == {n: id(t) for n, t in outer.items()}
    assert sorted(counted.closed) == ["h0", "h1", "h2", "h3"] and len(counted.made) == 4


def test_nested_scopes_close_their_own() -> None:
    counted = Counted()
    with held():
        outer = shared("h0", counted.make)
        with held():
            inner = shared("h0", counted.make)
            assert inner is not outer
        assert counted.closed == ["h0"]
    assert counted.closed == ["h0", "h0"]
