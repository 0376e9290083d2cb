"""A local port forwarded through an SSH connection (what `ssh -L` does), for servers that only the
host specctl reaches can reach: a Slurm cluster's compute nodes behind their login node.

Each accepted local connection becomes one `direct-tcpip` channel of the connection, opened by the
host's sshd towards (host, port), and bytes are copied both ways until either side closes.

The SSH connection may drop under it (a login node's sshd restarted, a network blip): the listener
stays, a channel that cannot be opened because the connection is down is tried again (the runner
reconnects) for up to LOGIN_BLIP_BUDGET_S, and a request cut off before any of its answer came back
is sent again, whole, on a new channel (what the client sent is kept until the answer begins). An
answer cut off midway cannot be mended here: the client sees its connection closed, as it would
for a server that dropped it. The far side refusing the channel (nothing listens there) is an
answer, never retried.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Callable
from typing import Any

import paramiko

from specctl.constants import LOGIN_BLIP_BUDGET_S

__all__ = ["Tunnel"]

OpenChannel = Callable[[tuple[str, int]], Any]  # (host, port) -> a paramiko Channel (or anything socket-like)
RETRY_PAUSE_S = 0.5  # between attempts to open a channel while the connection is down


class Tunnel:
    """127.0.0.1:<local_port> -> (host, port), through `open_channel`; `close` ends it and its connections."""

    def __init__(
        self, open_channel: OpenChannel, host: str, port: int, *, blip_budget_s: float = LOGIN_BLIP_BUDGET_S
    ) -> None:
        self._open = open_channel
        self.target = (host, port)
        self.blip_budget_s = blip_budget_s
        self._listener = socket.socket()
        self._listener.bind(("127.0.0.1", 0))
        self._listener.listen(16)
        self.local_port: int = self._listener.getsockname()[1]
        self._closed = threading.Event()
        threading.Thread(target=self._accept, name=f"tunnel-{host}:{port}", daemon=True).start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._listener.accept()
            except OSError:
                return  # closed
            threading.Thread(target=self._pipe, args=(client,), daemon=True).start()

    def _pipe(self, client: socket.socket) -> None:
        channel = self._channel()
        if channel is None:
            client.close()  # the client sees a reset
            return
        sent = bytearray()  # what the client sent, until the answer begins: sent again should the connection drop
        answered = False
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, channel], [], [], 0.5)
                if client in ready:
                    data = client.recv(65536)
                    if not data:
                        return
                    sent += b"" if answered else data
                    if not self._send(channel, data):
                        channel = self._again(channel, sent, answered)
                        if channel is None:
                            return
                        continue
                if channel in ready:
                    answer = self._recv(channel)
                    if answer is None or (not answer and _dropped(channel)):
                        channel = self._again(channel, sent, answered)
                        if channel is None:
                            return
                        continue
                    if not answer:
                        return
                    answered = True
                    sent.clear()
                    client.sendall(answer)
        except OSError:
            return
        finally:
            if channel is not None:
                channel.close()
            client.close()

    def _channel(self) -> Any | None:
        """A new channel to the target; tried again while the connection under it is down, up to the
        blip budget. None: the far side refused, or the connection stayed down."""
        deadline = time.monotonic() + self.blip_budget_s
        while not self._closed.is_set():
            try:
                return self._open(self.target)
            except paramiko.ChannelException:
                return None  # sshd reached the host, and nothing there took the connection: an answer
            except Exception:  # noqa: BLE001 - the connection is down (ConnectionLost, SSHException, OSError)
                if time.monotonic() + RETRY_PAUSE_S > deadline:
                    return None
                time.sleep(RETRY_PAUSE_S)
        return None

    def _again(self, channel: Any, sent: bytearray, answered: bool) -> Any | None:
        """After the connection dropped under `channel`: the request sent again on a new channel, if
        none of its answer came back yet (else None: the client's connection ends)."""
        channel.close()
        if answered:
            return None
        fresh = self._channel()
        if fresh is not None and not self._send(fresh, bytes(sent)):
            fresh.close()
            return None
        return fresh

    @staticmethod
    def _send(channel: Any, data: bytes) -> bool:
        try:
            channel.sendall(data)
            return True
        except (OSError, EOFError, paramiko.SSHException):
            return False

    @staticmethod
    def _recv(channel: Any) -> bytes | None:
        """What the channel has; None when the connection under it broke."""
        try:
            data: bytes = channel.recv(65536)
            return data
        except (OSError, EOFError, paramiko.SSHException):
            return None

    def close(self) -> None:
        self._closed.set()
        self._listener.close()


def _dropped(channel: Any) -> bool:
    """The channel ended because the SSH connection under it did (not because the far side closed)."""
    transport = channel.get_transport() if hasattr(channel, "get_transport") else None
    return transport is not None and not transport.is_active()
