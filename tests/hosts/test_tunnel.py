"""The tunnel when the SSH connection under it drops: channels opened again within the blip budget,
a request cut off before its answer began sent again whole, and a refusal by the far side never
retried. Channels here are plain sockets to a local server, with a stand-in for paramiko's transport
(is the connection up?); the real one is exercised through a login node in
tests/integration/test_slurm_deploy.py."""

from __future__ import annotations

import socket
import threading
from typing import Any

import paramiko

from specctl.errors import ConnectionLost
from specctl.hosts.tunnel import Tunnel

REQUEST = b"POST /generate HTTP/1.0\r\nContent-Length: 2\r\n\r\n{}"


class _Link:
    """The SSH connection a channel rides: up, or dropped."""

    def __init__(self) -> None:
        self.up = True

    def is_active(self) -> bool:
        return self.up


class _Channel:
    def __init__(self, sock: socket.socket, link: _Link) -> None:
        self.sock, self.link = sock, link

    def fileno(self) -> int:
        return self.sock.fileno()

    def recv(self, n: int) -> bytes:
        return self.sock.recv(n)

    def sendall(self, data: bytes) -> None:
        self.sock.sendall(data)

    def close(self) -> None:
        self.sock.close()

    def get_transport(self) -> _Link:
        return self.link


def _server(answers: list[bytes | None]) -> tuple[int, list[bytes]]:
    """A server taking one request a connection: it answers with the next of `answers`, or (None)
    closes without answering. Returns its port and the requests it read."""
    listener = socket.create_server(("127.0.0.1", 0))
    seen: list[bytes] = []

    def serve() -> None:
        for answer in answers:
            conn, _ = listener.accept()
            data = b""
            while not data.endswith(b"{}"):
                data += conn.recv(4096)
            seen.append(data)
            if answer is not None:
                conn.sendall(answer)
            conn.close()
        listener.close()

    threading.Thread(target=serve, daemon=True).start()
    return int(listener.getsockname()[1]), seen


def _ask(tunnel: Tunnel) -> bytes:
    with socket.create_connection(("127.0.0.1", tunnel.local_port), timeout=10) as conn:
        conn.sendall(REQUEST)
        answer = b""
        try:
            while chunk := conn.recv(4096):
                answer += chunk
        except ConnectionResetError:  # closed with the request unread: what a client sees of a refusal
            pass
        return answer


def test_a_request_cut_off_by_a_dropped_connection_is_sent_again_once_it_is_back() -> None:
    port, seen = _server([None, b"HTTP/1.0 200 OK\r\n\r\nok"])
    links: list[_Link] = []
    failures = [2]  # the connection is down for the next two attempts after the first channel

    def open_channel(where: tuple[str, int]) -> Any:
        if links and failures[0]:
            failures[0] -= 1
            raise ConnectionLost("h0: cannot connect", host="h0")
        link = _Link()
        links.append(link)
        channel = _Channel(socket.create_connection(where), link)
        if len(links) == 1:
            link.up = False  # this connection drops while the request is in flight
        return channel

    tunnel = Tunnel(open_channel, "127.0.0.1", port, blip_budget_s=5)
    try:
        assert _ask(tunnel) == b"HTTP/1.0 200 OK\r\n\r\nok"
    finally:
        tunnel.close()
    assert seen == [REQUEST, REQUEST] and len(links) == 2


def test_a_far_side_that_refuses_or_closes_is_an_answer_never_retried() -> None:
    calls: list[int] = []

    def refused(where: tuple[str, int]) -> Any:
        calls.append(1)
        raise paramiko.ChannelException(2, "Connection refused")

    tunnel = Tunnel(refused, "127.0.0.1", 1, blip_budget_s=5)
    try:
        assert _ask(tunnel) == b"" and calls == [1]
    finally:
        tunnel.close()
    port, seen = _server([None, None])  # the server itself drops the request: the connection is up
    tunnel = Tunnel(lambda where: _Channel(socket.create_connection(where), _Link()), "127.0.0.1", port)
    try:
        assert _ask(tunnel) == b"" and seen == [REQUEST]
    finally:
        tunnel.close()


def test_a_connection_that_stays_down_past_the_budget_fails_the_request() -> None:
    def down(where: tuple[str, int]) -> Any:
        raise ConnectionLost("h0: cannot connect", host="h0")

    tunnel = Tunnel(down, "127.0.0.1", 1, blip_budget_s=1)
    try:
        assert _ask(tunnel) == b""
    finally:
        tunnel.close()
