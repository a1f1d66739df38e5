"""A webhook receiver for the notification tests: an HTTP server on loopback that records every
JSON body POSTed to it (answering 204), and the Airflow connection that points a notifier at it."""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, HTTPServer
from typing import Any


class WebhookReceiver:
    """Started on a free loopback port; `received` lists the posted bodies, oldest first.
    Use it as a context manager, or call `stop()`."""

    def __init__(self) -> None:
        self.received: list[dict[str, Any]] = []
        received = self.received

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:
                body = self.rfile.read(int(self.headers["Content-Length"]))
                received.append(json.loads(body))
                self.send_response(204)
                self.end_headers()

            def log_message(self, *args: object) -> None:
                pass

        self._server = HTTPServer(("127.0.0.1", 0), Handler)
        self.port = self._server.server_port
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def connection(self) -> str:
        """The receiver as an Airflow connection's JSON (for `AIRFLOW_CONN_<ID>`)."""
        return json.dumps({"conn_type": "http", "host": "127.0.0.1", "port": self.port, "schema": "http"})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def __enter__(self) -> WebhookReceiver:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()
