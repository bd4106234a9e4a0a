"""A TCP proxy that caps the bytes clients send through it: a destination slower than the gateway, as a broker on a
thin link (or a slow disk) is. The answers come back unhindered. Threads and blocking sockets: the caps tests use
(a few MB/s) are far below what it moves."""

from __future__ import annotations

import socket
import threading
import time


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _Bucket:
    """Bytes/s shared by every connection (a token bucket, a tenth of a second deep)."""

    def __init__(self, rate: float):
        self.rate = rate
        self._tokens = 0.0
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def take(self, n: int) -> None:
        while True:
            with self._lock:
                now = time.monotonic()
                self._tokens = min(self.rate / 10, self._tokens + (now - self._at) * self.rate)
                self._at = now
                if self._tokens >= n or self._tokens >= self.rate / 10:
                    self._tokens -= n
                    return
                wait = (min(n, self.rate / 10) - self._tokens) / self.rate
            time.sleep(wait)


class Throttle:
    """Listens on `port` (a free one by default) and forwards each connection to `target_port` on loopback, at most
    `rate` bytes/s from the clients all together."""

    CHUNK = 16384

    def __init__(self, target_port: int, rate: float, port: int = 0):
        self.target_port = target_port
        self.bucket = _Bucket(rate)
        self.port = port or free_port()
        self._server = socket.create_server(("127.0.0.1", self.port))
        self._closed = threading.Event()
        self._socks: list[socket.socket] = []
        threading.Thread(target=self._accept, daemon=True, name="throttle-accept").start()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                client, _ = self._server.accept()
            except OSError:
                return
            try:
                server = socket.create_connection(("127.0.0.1", self.target_port))
            except OSError:
                client.close()
                continue
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._socks.append(s)
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, capped: bool) -> None:
        try:
            while True:
                data = src.recv(self.CHUNK)
                if not data:
                    break
                if capped:
                    self.bucket.take(len(data))
                dst.sendall(data)
        except OSError:
            pass
        finally:
            for s in (src, dst):
                try:
                    s.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def close(self) -> None:
        self._closed.set()
        self._server.close()
        for s in self._socks:
            try:
                s.close()
            except OSError:
                pass

    def __enter__(self) -> Throttle:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
