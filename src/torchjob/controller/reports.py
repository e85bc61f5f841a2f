"""The operator's report endpoint: where torchjob.train inside a Pod sends its progress.

``POST /reports/<namespace>/<job>`` with the report as JSON and the Pod's report token as a bearer token.
204 when taken; 401 without a valid token of a Pod in that namespace; 400 for a body that is not a report;
413 for one over 4 KiB. The job in the path only says which job to look at again soon: the report is
filed under the Pod the token names (``backends/kubernetes/reports.py``), so a path cannot misfile it.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from torchjob.backends.kubernetes.reports import ReportBoard, TokenReviewer

log = logging.getLogger("torchjob.operator")

_PATH = re.compile(r"^/reports/(?P<namespace>[a-z0-9-]{1,63})/(?P<job>[a-z0-9.-]{1,253})$")
_MAX_BODY = 4096


def report_path(namespace: str, job: str) -> str:
    return f"/reports/{namespace}/{job}"


def report_server(
    board: ReportBoard,
    reviewer: TokenReviewer,
    address: tuple[str, int],
    on_report: Callable[[str, str], None],
) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) on ``address``; ``on_report(namespace, job)`` after each report."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            matched = _PATH.match(self.path)
            if matched is None:
                self._answer(404, "no such endpoint: POST /reports/<namespace>/<job>")
                return
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._answer(413, f"a report is at most {_MAX_BODY} bytes")
                return
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            pod = reviewer.review(token) if token else None
            if pod is None or pod.namespace != matched["namespace"]:
                self._answer(401, "a Pod's torchjob report token is required")
                return
            try:
                report = json.loads(self.rfile.read(length))
            except ValueError:
                report = None
            if not isinstance(report, dict) or not board.put(pod, report):
                self._answer(400, "the body is not a progress report: a JSON object with an integer step")
                return
            self._answer(204, "")
            on_report(matched["namespace"], matched["job"])

        def _answer(self, code: int, message: str) -> None:
            self.send_response(code)
            self.end_headers()
            if message:
                self.wfile.write(f"{message}\n".encode())

        def log_message(self, *args: Any) -> None:  # one report per Pod per second: not worth a log line
            return

    server = ThreadingHTTPServer(address, Handler)
    server.daemon_threads = True
    return server
