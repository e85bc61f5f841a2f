"""The operator's endpoints for Pods: where torchjob.train sends its progress, and in-place repair's channel.

Every call carries the Pod's report token as a bearer token; 401 without a valid token of a Pod in the
path's namespace, 503 when the API server cannot review it now (``backends/kubernetes/token_review.py``). What
a Pod says is filed under the Pod the token names (``backends/kubernetes/report_board.py``), so a path cannot
misfile it; the job in the path only says which job to look at again soon.

- ``POST /reports/<namespace>/<job>``: a progress report (JSON). 204; 200 with ``{"leave": <why>}`` to a
  process ordered out of its group (``ReportBoard.order_leave``); 400 for a body that is not a report; 413 for
  one over 4 KiB.
- ``POST /announcements/<namespace>/<job>``: ``{"attempt": A}``, the Pod trains under the in-place loop of
  attempt A (a spare: it is warm and waiting); a member adds how often it says so (``every``) and, when its step
  has waited past its allowance, that step's generation (``waiting``). 200 with the membership (as ``GET
  /membership``): a member's watching thread makes one request for both.
- ``GET /membership/<namespace>/<job>``: the group's membership as the operator last formed it (the JSON
  of ``membership.json`` locally), ``{}`` before any repair.
- ``POST /trainers/<namespace>/<job>``: a Pod's launcher (torchjob.launch) says how its trainer is:
  ``{"attempt": A}`` running, ``{"attempt": A, "exit_code": C}`` ended. 200 with ``{}``, or the order to start a
  later attempt warm (``worker_files.RestartOrder``).
"""

from __future__ import annotations

import json
import logging
import re
import resource
import ssl
import threading
from collections.abc import Callable
from datetime import datetime, timezone
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, cast

from torchjob import worker_files
from torchjob.backends.kubernetes.report_board import ReportBoard
from torchjob.backends.kubernetes.token_review import PodIdentity, ReviewUnavailable, TokenReviewer
from torchjob.core.reported import MemberAnnouncement, TrainerState

log = logging.getLogger("torchjob.operator")

_PATH = re.compile(
    r"^/(?P<kind>reports|announcements|membership|trainers)/(?P<namespace>[a-z0-9-]{1,63})/(?P<job>[a-z0-9.-]{1,253})$"
)
_MAX_BODY = 4096


def report_server(
    board: ReportBoard,
    reviewer: TokenReviewer,
    address: tuple[str, int],
    on_report: Callable[[str, str, bool, str], None],
) -> ThreadingHTTPServer:
    """An HTTP server (not yet serving) on ``address``; ``on_report(namespace, job, news, pod_uid)`` after each
    report and announcement, ``news`` when the job should be looked at at once (``ReportBoard.announce``)."""

    class Handler(BaseHTTPRequestHandler):
        # Keep-alive: a Pod's process keeps its connection for its reports (``torchjob.reporting``), so the TLS
        # handshake is once per process, not once a second. The connection's thread waits for its next request.
        protocol_version = "HTTP/1.1"
        timeout = 10  # seconds: a caller that stalls (in the TLS handshake too) or goes quiet loses only its thread

        def setup(self) -> None:
            super().setup()
            if isinstance(self.request, ssl.SSLSocket):
                self.request.do_handshake()  # here, in the request's thread, not in the accepting one

        def do_GET(self) -> None:
            matched = self._authorized("membership")
            if matched is not None:
                assert self._pod is not None
                self._answer(200, json.dumps(_membership_for(board, matched[0], matched[1], self._pod.uid)))

        def do_POST(self) -> None:
            matched = self._authorized("reports", "announcements", "trainers")
            if matched is None:
                return
            (namespace, job), pod = matched, self._pod
            assert pod is not None
            length = int(self.headers.get("Content-Length") or 0)
            if length > _MAX_BODY:
                self._answer(413, f"a report is at most {_MAX_BODY} bytes")
                return
            try:
                body = json.loads(self.rfile.read(length))
            except ValueError:
                body = None
            if self._kind == "trainers":
                state = TrainerState.from_message(body, datetime.now(timezone.utc))
                if state is None:
                    self._answer(400, 'a trainer\'s state is {"attempt": <integer>[, "exit_code": <0-255>]}')
                    return
                news, order = board.trainer_said(pod, state)
                on_report(namespace, job, news, pod.uid)
                self._answer(200, json.dumps(order or {}))
                return
            if self._kind == "announcements":
                announcement = MemberAnnouncement.from_message(body, datetime.now(timezone.utc))
                if announcement is None:
                    self._answer(400, 'an announcement is {"attempt": <the attempt, an integer>}')
                    return
                news = board.announce(pod, announcement)
                if body.get(worker_files.ANNOUNCE_NOTICE) is True:  # on notice of eviction: look at once
                    news = board.notices.heard(namespace, job, pod.uid, announcement.heard_at) or news
                on_report(namespace, job, news, pod.uid)
                self._answer(200, json.dumps(_membership_for(board, namespace, job, pod.uid)))
                return
            if not isinstance(body, dict) or not board.put(pod, body):
                self._answer(400, "the body is not a progress report: a JSON object with an integer step")
                return
            # Before the answer: a caller that got its 204 finds the job woken.
            on_report(namespace, job, False, pod.uid)
            why = board.leave_order(pod.uid, body.get(worker_files.REPORT_PROCESS))
            if why is not None:
                self._answer(200, json.dumps({worker_files.ANSWER_LEAVE: why}))
                return
            self._answer(204, "")

        def _authorized(self, *kinds: str) -> tuple[str, str] | None:
            """(namespace, job) of a call to one of ``kinds`` by a Pod of that namespace; else answered."""
            self._pod: PodIdentity | None = None
            matched = _PATH.match(self.path)
            if matched is None or matched["kind"] not in kinds:
                endpoints = "POST /reports|/announcements|/trainers, GET /membership /<namespace>/<job>"
                self._answer(404, f"no such endpoint: {endpoints}")
                return None
            self._kind = matched["kind"]
            token = (self.headers.get("Authorization") or "").removeprefix("Bearer ").strip()
            try:
                pod = reviewer.review(token) if token else None
            except ReviewUnavailable as err:
                self._answer(503, f"{err}; try again")  # the Pod's next beat does
                return None
            if pod is None or pod.namespace != matched["namespace"]:
                self._answer(401, "a Pod's torchjob report token is required")
                return None
            self._pod = pod
            return matched["namespace"], matched["job"]

        def _answer(self, code: int, message: str) -> None:
            body = f"{message}\n".encode() if message else b""
            self.send_response(code)
            if code != 204:
                self.send_header("Content-Length", str(len(body)))
            # A refused request's body may still be unread on the connection: it is not reused.
            if code >= 400 or cast(_Server, self.server).crowded():
                self.send_header("Connection", "close")
                self.close_connection = True
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: Any) -> None:  # one report per Pod per second: not worth a log line
            return

    server = _Server(address, Handler)
    server.daemon_threads = True
    return server


def _membership_for(board: ReportBoard, namespace: str, job: str, uid: str) -> dict[str, Any]:
    """The job's membership as Pod ``uid`` is told it, saying whether a pass has looked at its notice of
    eviction since it was heard (notices.py). Read in that order: a pass publishes before it counts as ended."""
    considered = board.notices.considered(uid)
    answer: dict[str, Any] = dict(board.membership(namespace, job) or {})
    if considered:
        answer[worker_files.NOTICE_CONSIDERED] = True
    return answer


class _Server(ThreadingHTTPServer):
    # Pods connect in bursts (a new leader, a job's start): socketserver's accept queue of 5 overflows, and a
    # connection dropped there is tried again only after a second (TCP's first retransmission). The kernel caps
    # it at net.core.somaxconn.
    request_queue_size = 4096

    def __init__(self, address: tuple[str, int], handler: type[BaseHTTPRequestHandler]) -> None:
        super().__init__(address, handler)
        # Kept connections hold a file descriptor (and a thread) each: at most half the process's open files, so
        # that the API client, the watches and the health probes always find one. Over it, each answer closes
        # its connection (the Pod's next report opens another): slower, never refused.
        self.keep_at_most = resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 2
        self._open = 0
        self._lock = threading.Lock()

    def crowded(self) -> bool:
        return self._open > self.keep_at_most

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._lock:
            self._open += 1
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        try:
            super().shutdown_request(request)
        finally:
            with self._lock:
                self._open -= 1

    def handle_error(self, request: Any, client_address: Any) -> None:
        # A caller that fails the TLS handshake (no CA, the wrong CA) or hangs up: its problem, said in one line.
        log.debug("report endpoint: a call from %s failed", client_address, exc_info=True)
