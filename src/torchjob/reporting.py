"""Progress reports to the operator, from inside a Pod: how hang detection and ``trainerStatus`` work on a
cluster with nothing for the user to set up.

The operator injects ``TORCHJOB_REPORT_URL`` and a projected service-account token whose audience is only
torchjob's reports (``worker_files.REPORT_AUDIENCE``): the token grants nothing on the API server, and the
operator learns from it (TokenReview) which Pod is reporting. The report is the heartbeat file's JSON.

Best effort by design: a report that cannot be delivered never stops training. The first failure is said
once on stderr, then at most once a minute (never, for ``torchjob.autoreport``, which must not print).

One answer changes what the process does: an order to leave its group (``worker_files.ANSWER_LEAVE``), given
to the survivors of a member lost with its node (``core.actions.LeaveGroup``), whose collective would otherwise
wait out the group's whole timeout. The process says why on stderr and exits at once, from the reporting
thread, while its main thread waits in that collective; its launcher (torchrun's agent) forms the group again.
Each report names its process, so that only the processes of the broken group leave.
Standard library only, and no torch: ``torchjob.autoreport`` uses it in every Python process of a Pod.
"""

from __future__ import annotations

import contextlib
import http.client
import json
import os
import ssl
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from torchjob import worker_files

_TIMEOUT_SECONDS = 2.0
_COMPLAIN_EVERY_SECONDS = 60.0
_process_ids: dict[int, str] = {}


def process_id() -> str:
    """This process's name in its reports: new in each process, a forked one included (a pid alone may come
    back in a container)."""
    pid = os.getpid()
    if pid not in _process_ids:
        _process_ids[pid] = f"{pid}-{uuid.uuid4().hex[:8]}"
    return _process_ids[pid]


def operator_from_env() -> tuple[str, Path] | None:
    """(``TORCHJOB_REPORT_URL``, the token file) in a Pod the operator gave them to; None elsewhere."""
    url = os.environ.get(worker_files.ENV_REPORT_URL)
    token_file = os.environ.get(worker_files.ENV_REPORT_TOKEN_FILE)
    return (url, Path(token_file)) if url and token_file else None


class Refused(OSError):
    """The operator answered, but not with a 2xx: ``code`` is its HTTP status."""

    def __init__(self, code: int, message: str) -> None:
        super().__init__(f"HTTP {code}: {message}")
        self.code = code


class _Kept(threading.local):
    """This thread's open connections to the operator, by (process, scheme, host, port, CA): one per thread, as
    an HTTP connection carries one request at a time; new in a forked process, which must not share its parent's
    TLS session; new when the CA changes, as trust is settled once per connection."""

    def __init__(self) -> None:
        self.connections: dict[tuple[object, ...], http.client.HTTPConnection] = {}


_kept = _Kept()
# How a kept connection the operator has closed fails on use: a reset, an end without TLS's close_notify (the
# server's side shuts the socket down under TLS), or no answer at all.
_CLOSED = (ConnectionError, ssl.SSLEOFError, ssl.SSLZeroReturnError, http.client.BadStatusLine)


def call_operator(url: str, token_file: Path, body: dict[str, Any] | None = None) -> bytes:
    """GET ``url`` (or POST ``body`` as JSON) as this Pod, and return the answer's body. Raises OSError (ssl's
    errors and :class:`Refused` included) or ValueError when the operator cannot be reached or refuses.

    The connection stays open for the next call (HTTP/1.1 keep-alive): every process reports each second, and a
    TLS handshake per report would cost the operator more than the report. A kept connection the operator closed
    meanwhile (its idle timeout, a restart) fails on use: the call is made once more on a new one."""
    # Read each time: the kubelet rotates projected tokens before they expire.
    headers = {"Authorization": f"Bearer {token_file.read_text().strip()}"}
    data = None if body is None else json.dumps(body).encode()
    if data is not None:
        headers["Content-Type"] = "application/json"
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"not an operator's URL: {url!r}")
    ca = os.environ.get(worker_files.ENV_REPORT_CA) if parts.scheme == "https" else None
    key = (os.getpid(), parts.scheme, parts.hostname, parts.port, ca)
    for fresh in (key not in _kept.connections, True):
        connection = _kept.connections.get(key) or _connect(parts.scheme, parts.hostname, parts.port, ca)
        _kept.connections[key] = connection
        try:
            connection.request("GET" if data is None else "POST", parts.path, body=data, headers=headers)
            answer = connection.getresponse()
            text = answer.read()
        except (OSError, http.client.HTTPException) as err:
            _kept.connections.pop(key, None)
            connection.close()
            # Only a kept connection found closed is tried again (after a timeout the operator may have the report).
            if fresh or not isinstance(err, _CLOSED):
                raise err if isinstance(err, OSError) else OSError(f"the operator's answer broke off: {err!r}") from err
            continue
        if answer.will_close:
            _kept.connections.pop(key, None)
            connection.close()
        if not 200 <= answer.status < 300:
            raise Refused(answer.status, text.decode(errors="replace").strip()[:200])
        return text
    raise AssertionError("unreachable: the second try is always on a new connection")


def _connect(scheme: str, host: str, port: int | None, ca: str | None) -> http.client.HTTPConnection:
    if scheme == "https":
        return http.client.HTTPSConnection(host, port, timeout=_TIMEOUT_SECONDS, context=_tls_context(ca))
    return http.client.HTTPConnection(host, port, timeout=_TIMEOUT_SECONDS)


def _leave(why: str) -> None:
    """End this process at once, saying why (its main thread waits in a collective that will never end)."""
    with contextlib.suppress(OSError, ValueError, AttributeError):  # an output already closed: leave anyway
        sys.stdout.flush()
        print(
            f"torchjob: {why}: this process leaves its group (exit {worker_files.LEAVE_EXIT_CODE}), and its "
            "launcher forms the group again",
            file=sys.stderr,
            flush=True,
        )
    os._exit(worker_files.LEAVE_EXIT_CODE)


def _order_to_leave(answer: bytes) -> str | None:
    """The reason the operator gave for ordering this process out of its group; None for any other answer."""
    try:
        said = json.loads(answer) if answer.strip() else None
    except ValueError:
        return None
    why = said.get(worker_files.ANSWER_LEAVE) if isinstance(said, dict) else None
    return why if isinstance(why, str) and why else None


def _tls_context(ca: str | None) -> ssl.SSLContext:
    """Verify the endpoint with the operator's CA (``TORCHJOB_REPORT_CA``) and nothing else (the token is a
    credential; it goes only to the endpoint that CA vouches for). Without the CA, the system's trust store
    decides, and the operator's own CA is in none."""
    return ssl.create_default_context(cadata=ca) if ca else ssl.create_default_context()


class Reporter:
    def __init__(self, url: str, token_file: Path, quiet: bool = False) -> None:
        self.url = url
        self.token_file = token_file
        self.quiet = quiet
        self._complained_at: float | None = None

    @classmethod
    def from_env(cls, quiet: bool = False) -> Reporter | None:
        """The reporter the operator asked for, or None where nobody listens (locally, or no operator)."""
        found = operator_from_env()
        return cls(*found, quiet=quiet) if found else None

    def send(self, report: dict[str, Any]) -> bool:
        """POST one report; True when the operator took it (urllib raises for any answer but 2xx). An answer
        that orders this process out of its group ends the process (see the module's docstring)."""
        try:
            answer = call_operator(self.url, self.token_file, {**report, worker_files.REPORT_PROCESS: process_id()})
        except (OSError, ValueError) as err:
            self._complain(err)
            return False
        why = _order_to_leave(answer)
        if why is not None and report.get(worker_files.REPORT_EXITING) is not True:  # exiting: with its own code
            _leave(why)
        return True

    def _complain(self, err: Exception) -> None:
        if self.quiet:
            return
        now = time.monotonic()
        if self._complained_at is None or now - self._complained_at >= _COMPLAIN_EVERY_SECONDS:
            self._complained_at = now
            print(f"torchjob: could not report progress to {self.url}: {err}", file=sys.stderr, flush=True)
