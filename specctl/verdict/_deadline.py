"""One request's deadline, below http.client: a Call names the request and when it must be done;
its socket waits at most a tick at a time, so name resolution, connect, send and every read honour
the deadline and the cancel token, and a server that accepts and never answers, or drips a byte at
a time, cannot hold a flow past its deadline or past the first SIGINT. Standard library only."""

from __future__ import annotations

import errno
import http.client
import os
import selectors
import socket
import threading
import time
from dataclasses import dataclass
from typing import Any

from specctl.cancel import CancelToken
from specctl.verdict.engine_errors import EngineTimeout

__all__ = ["TICK_S", "Call", "Connection", "TickingSocket", "open_socket"]

TICK_S = 0.25  # the longest a blocking socket call waits before the deadline and the cancel token are checked


@dataclass(frozen=True)
class Call:
    """One request in flight: what to name it in errors, when it must be done, what may cancel it."""

    method: str
    path: str
    host: str
    deadline_s: float
    ends_at: float  # time.monotonic()
    cancel: CancelToken

    def next_wait_s(self) -> float:
        """How long the next blocking call may wait: a tick, never past the deadline.

        Raises:
            Cancelled: the token was cancelled.
            EngineTimeout: the deadline has passed.
        """
        self.cancel.check()
        left = self.ends_at - time.monotonic()
        if left <= 0:
            raise EngineTimeout(
                f"{self.method} {self.path} on {self.host}: no complete answer within {self.deadline_s:g} s",
                host=self.host,
                deadline_s=self.deadline_s,
                method=self.method,
                path=self.path,
                fix="the server is hung or overloaded: read its log (`specctl logs`), or allow it more time",
            )
        return min(TICK_S, left)


class TickingSocket(socket.socket):
    """A socket whose blocking calls wait at most a tick at a time, checking the call between ticks.

    http.client reads through `makefile()`, which calls `recv_into`; a socket timeout surfacing there
    would leave the reader unusable, so the waiting loops live here, below it, and http.client only
    ever sees data, end of stream, or the call's own EngineTimeout or Cancelled.
    """

    call: Call

    def connect_within(self, address: Any) -> None:
        """connect(), waiting in ticks; a blocking connect could take the kernel's minutes."""
        self.setblocking(False)
        err = self.connect_ex(address)
        if err in (errno.EINPROGRESS, errno.EWOULDBLOCK, errno.EAGAIN):
            with selectors.DefaultSelector() as selector:
                selector.register(self, selectors.EVENT_WRITE)
                while not selector.select(self.call.next_wait_s()):
                    pass
            err = self.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR)
        if err:
            raise OSError(err, os.strerror(err))

    def recv_into(self, buffer: Any, nbytes: int = 0, flags: int = 0, /) -> int:
        while True:
            self.settimeout(self.call.next_wait_s())
            try:
                return super().recv_into(buffer, nbytes, flags)
            except TimeoutError:
                continue

    def sendall(self, data: Any, flags: int = 0, /) -> None:
        view = memoryview(data).cast("B")
        sent = 0
        while sent < len(view):
            self.settimeout(self.call.next_wait_s())
            try:
                sent += self.send(view[sent:], flags)
            except TimeoutError:
                continue


def _resolve(host: str, port: int, call: Call) -> list[tuple[Any, ...]]:
    """Addresses for host:port; a name is resolved in a helper thread, as the resolver has no timeout."""
    try:
        return list(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_NUMERICHOST))
    except socket.gaierror:
        pass  # a name, not an address
    found: list[tuple[Any, ...]] = []
    failed: list[BaseException] = []
    done = threading.Event()

    def work() -> None:
        try:
            found.extend(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except (OSError, UnicodeError) as exc:
            failed.append(OSError(f"cannot resolve {host}: {exc}"))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller rather than to the thread's excepthook
            failed.append(exc)
        finally:
            done.set()

    threading.Thread(target=work, name=f"resolve {host}", daemon=True).start()
    while not done.wait(call.next_wait_s()):
        pass
    if failed:
        raise failed[0]
    return found


def open_socket(host: str, port: int, call: Call) -> TickingSocket:
    """A connected socket to the first address of host:port that accepts, as create_connection does."""
    last: OSError = OSError(f"{host} has no address")
    for family, kind, proto, _, address in _resolve(host, port, call):
        sock = TickingSocket(family, kind, proto)
        sock.call = call
        try:
            sock.connect_within(address)
        except OSError as exc:
            sock.close()
            last = exc
            continue
        except BaseException:
            sock.close()
            raise
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as http.client's own connect does
        return sock
    raise last


class Connection(http.client.HTTPConnection):
    """http.client's request writing and answer parsing over a TickingSocket."""

    def __init__(self, host: str, port: int, call: Call) -> None:
        super().__init__(host, port)
        self._call = call

    def connect(self) -> None:
        self.sock = open_socket(self.host, self.port, self._call)
