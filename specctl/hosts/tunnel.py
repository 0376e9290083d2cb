"""A local port forwarded through an SSH connection (what `ssh -L` does), for servers that only the
host specctl reaches can reach: a Slurm cluster's compute nodes behind their login node.

Each accepted local connection becomes one `direct-tcpip` channel of the connection, opened by the
host's sshd towards (host, port), and bytes are copied both ways until either side closes.
"""

from __future__ import annotations

import select
import socket
import threading
from collections.abc import Callable
from typing import Any

__all__ = ["Tunnel"]

OpenChannel = Callable[[tuple[str, int]], Any]  # (host, port) -> a paramiko Channel (or anything socket-like)


class Tunnel:
    """127.0.0.1:<local_port> -> (host, port), through `open_channel`; `close` ends it and its connections."""

    def __init__(self, open_channel: OpenChannel, host: str, port: int) -> None:
        self._open = open_channel
        self.target = (host, port)
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
        try:
            channel = self._open(self.target)
        except Exception:  # noqa: BLE001 - the far side refused or the connection is gone: the client sees a reset
            client.close()
            return
        try:
            while not self._closed.is_set():
                ready, _, _ = select.select([client, channel], [], [], 0.5)
                for source, sink in ((client, channel), (channel, client)):
                    if source in ready:
                        data = source.recv(65536)
                        if not data:
                            return
                        sink.sendall(data)
        except OSError:
            return
        finally:
            channel.close()
            client.close()

    def close(self) -> None:
        self._closed.set()
        self._listener.close()
