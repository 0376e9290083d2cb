"""The connections a command holds: one transport per host for the whole command, closed when it ends.

A command reaches a host from several places (the checkpoint read, the deploy's session, the server
list, the ledger's copy); each used to open its own SSH connection, and none closed it, so a program
that runs the CLI inside itself (the tests, `watch` each interval) kept every connection and its
paramiko thread until it exited. Inside `held()` each host's transport is opened once and every SSH
transport made is closed when the scope ends; outside it, nothing is shared or closed, as before.

The scope is a context variable: the thread pools of hosts/group.py run their work in the caller's
context, so a host reached from a pool shares the command's connection.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from specctl.hosts.transport import Transport


class Connections:
    """The transports made in one scope: those shared by key, and every one to close at its end."""

    def __init__(self) -> None:
        self._by_key: dict[Hashable, Transport] = {}
        self._made: list[Transport] = []
        self._guard = threading.RLock()  # `make` may register what it makes (ssh_transport does)

    def get(self, key: Hashable, make: Callable[[], Transport]) -> Transport:
        with self._guard:
            transport = self._by_key.get(key)
            if transport is None:
                transport = self._by_key[key] = make()
                self.close_at_end(transport)
            return transport

    def close_at_end(self, transport: Transport) -> None:
        with self._guard:
            if not any(t is transport for t in self._made):
                self._made.append(transport)

    def close(self) -> None:
        with self._guard:
            made, self._made, self._by_key = self._made, [], {}
        for transport in made:
            transport.close()


_scope: ContextVar[Connections | None] = ContextVar("specctl_connections", default=None)


@contextmanager
def held() -> Iterator[Connections]:
    """Hosts reached inside share one transport each; all are closed on the way out."""
    connections = Connections()
    token = _scope.set(connections)
    try:
        yield connections
    finally:
        _scope.reset(token)
        connections.close()


def shared(key: Hashable, make: Callable[[], Transport]) -> Transport:
    """The scope's transport for `key` (made on first use), or a new one outside any scope."""
    connections = _scope.get()
    return make() if connections is None else connections.get(key, make)


def close_at_end(transport: Transport) -> Transport:
    """`transport`, closed when the current scope ends (outside one, it is the caller's to close)."""
    connections = _scope.get()
    if connections is not None:
        connections.close_at_end(transport)
    return transport
