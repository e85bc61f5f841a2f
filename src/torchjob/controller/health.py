"""The operator's probes and numbers over HTTP: ``/healthz``, ``/readyz``, ``/metrics`` (Prometheus text, see
``controller/metrics.py``) and ``/counters`` (a small JSON of request counts and passes that bench/ reads).

It knows the operator only through the small protocol below, so it can serve one that is still waiting for
its lease, and a test can serve a stand-in.
"""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Protocol

from torchjob.controller.metrics import CONTENT_TYPE


class Probed(Protocol):
    @property
    def alive(self) -> bool: ...

    @property
    def ready(self) -> bool: ...

    def counters(self) -> dict[str, object]: ...

    def exposition(self) -> bytes: ...


def health_server(probed: Probed, port: int) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) on every address at ``port``: kubelet probes come from the node."""

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            if self.path in ("/metrics", "/counters"):
                prometheus = self.path == "/metrics"
                body = probed.exposition() if prometheus else json.dumps(probed.counters()).encode()
                self.send_response(200)
                self.send_header("Content-Type", CONTENT_TYPE if prometheus else "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            healthy = {"/healthz": probed.alive, "/readyz": probed.ready}.get(self.path)
            self.send_response(404 if healthy is None else 200 if healthy else 503)
            self.end_headers()
            self.wfile.write(b"ok\n" if healthy else b"not ready\n")

        def log_message(self, *args: Any) -> None:  # probes every few seconds: not worth a log line
            return

    return ThreadingHTTPServer(("0.0.0.0", port), Handler)
