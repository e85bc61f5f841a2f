"""The operator's probes and counters over HTTP: ``/healthz``, ``/readyz`` and ``/metrics`` (JSON).

It knows the operator only through the small protocol below, so it can serve one that is still waiting for
its lease, and a test can serve a stand-in.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol


class Probed(Protocol):
    @property
    def alive(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    def metrics(self) -> dict[str, object]: ...


def health_server(probed: Probed, port: int) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) on every address at ``port``: kubelet probes come from the node."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path == "/metrics":
                self.send_response(200)
                self.end_headers()
                self.wfile.write(json.dumps(probed.metrics()).encode())
                return
            healthy = {"/healthz": probed.alive, "/readyz": probed.ready}.get(self.path)
            self.send_response(404 if healthy is None else 200 if healthy else 503)
            self.end_headers()
            self.wfile.write(b"ok\n" if healthy else b"not ready\n")

        def log_message(self, *args: Any) -> None:  # probes every few seconds: not worth a log line
            return

    return ThreadingHTTPServer(("0.0.0.0", port), Handler)
