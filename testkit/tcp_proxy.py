"""A loopback TCP proxy that the fault tests (and test_docker_spool) put between a client and its
S3 server, and cut.

``cut_after_puts(n)`` lets ``n`` HTTP PUT requests through, then drops every connection (live and
new) until ``heal()``; with ``heal_after_s`` it heals by itself that long after the cut. A cut
looks to boto3 like an S3 endpoint that went away in the middle of an upload."""

from __future__ import annotations

import socket
import threading
import time


class CutProxy:
    def __init__(self, upstream_port: int, host: str = "127.0.0.1") -> None:
        self.upstream = (host, upstream_port)
        self._listener = socket.create_server((host, 0))
        self.port = self._listener.getsockname()[1]
        self.url = f"http://{host}:{self.port}"
        self._lock = threading.Lock()
        self._conns: set[socket.socket] = set()
        self._puts_left: int | None = None
        self.cut = False
        self.cut_at: float | None = None
        self.healed_at: float | None = None
        self._heal_after_s: float | None = None
        self.dropped = 0
        self._stop = False
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_after_puts(self, n: int, heal_after_s: float | None = None) -> None:
        with self._lock:
            self._puts_left, self._heal_after_s = n, heal_after_s

    def heal(self) -> None:
        with self._lock:
            self.cut, self._puts_left = False, None
            self.healed_at = time.monotonic()

    def close(self) -> None:
        self._stop = True
        self._listener.close()
        self._drop_all()

    def _do_cut(self) -> None:
        self.cut, self.cut_at = True, time.monotonic()
        if self._heal_after_s is not None:
            threading.Timer(self._heal_after_s, self.heal).start()

    def _drop_all(self) -> None:
        with self._lock:
            conns, self._conns = list(self._conns), set()
        for c in conns:
            try:
                c.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            c.close()

    def _accept(self) -> None:
        while not self._stop:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.cut:
                self.dropped += 1
                client.close()
                continue
            try:
                server = socket.create_connection(self.upstream, timeout=5)
            except OSError:
                client.close()
                continue
            with self._lock:
                self._conns |= {client, server}
            threading.Thread(target=self._pump, args=(client, server, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(server, client, False), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, upstream: bool) -> None:
        try:
            while True:
                data = src.recv(65536)
                if not data or self.cut:
                    break
                if upstream and self._puts_left is not None:
                    with self._lock:
                        self._puts_left -= data.count(b"PUT /")
                        trip = self._puts_left < 0
                    if trip:
                        self._do_cut()
                        self.dropped += 1
                        break
                dst.sendall(data)
        except OSError:
            pass
        for s in (src, dst):
            try:
                s.close()
            except OSError:
                pass
        if self.cut:
            self._drop_all()
