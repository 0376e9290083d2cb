"""A delaying TCP proxy of the test suite's own (the kernel here has no netem): every chunk is
delivered `delay_s` after it arrived, in order, both ways; `cut()` drops every connection."""

from __future__ import annotations

import heapq
import socket
import threading
import time


class DelayProxy:
    def __init__(self, upstream: tuple[str, int], delay_s: float) -> None:
        self.upstream, self.delay_s = upstream, delay_s
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = int(self.listener.getsockname()[1])
        self.sockets: list[socket.socket] = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self.closed:
            try:
                client, _ = self.listener.accept()
                server = socket.create_connection(self.upstream, timeout=10)
            except OSError:
                continue
            self.sockets += [client, server]
            for src, dst in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(src, dst), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket) -> None:
        queue: list[tuple[float, int, bytes]] = []
        lock, ready = threading.Lock(), threading.Event()
        count = 0

        def send() -> None:
            while True:
                ready.wait()
                with lock:
                    if not queue:
                        ready.clear()
                        continue
                    due, _, data = queue[0]
                wait = due - time.monotonic()
                if wait > 0:
                    time.sleep(wait)
                with lock:
                    heapq.heappop(queue)
                if not data:
                    try:
                        dst.shutdown(socket.SHUT_WR)
                    except OSError:  # the other side or cut() closed it already
                        pass
                    return
                try:
                    dst.sendall(data)
                except OSError:
                    return

        threading.Thread(target=send, daemon=True).start()
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            with lock:
                count += 1
                heapq.heappush(queue, (time.monotonic() + self.delay_s, count, data))
                ready.set()
            if not data:
                return

    def cut(self) -> None:
        for s in self.sockets:
            try:
                s.close()
            except OSError:
                pass
        self.sockets.clear()

    def close(self) -> None:
        self.closed = True
        self.cut()
        self.listener.close()
