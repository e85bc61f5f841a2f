"""Progress reports to the operator, from inside a Pod: how hang detection and ``trainerStatus`` work on a
cluster with nothing for the user to set up.

The operator injects ``TORCHJOB_REPORT_URL`` and a projected service-account token whose audience is only
torchjob's reports (``worker_files.REPORT_AUDIENCE``): the token grants nothing on the API server, and the
operator learns from it (TokenReview) which Pod is reporting. The report is the heartbeat file's JSON.

Best effort by design: a report that cannot be delivered never stops training. The first failure is said
once on stderr, then at most once a minute.
"""

from __future__ import annotations

import json
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

from torchjob import worker_files

_TIMEOUT_SECONDS = 2.0
_COMPLAIN_EVERY_SECONDS = 60.0


class Reporter:
    def __init__(self, url: str, token_file: Path) -> None:
        self.url = url
        self.token_file = token_file
        self._complained_at: float | None = None

    @classmethod
    def from_env(cls) -> Reporter | None:
        """The reporter the operator asked for, or None where nobody listens (locally, or no operator)."""
        url = os.environ.get(worker_files.ENV_REPORT_URL)
        token_file = os.environ.get(worker_files.ENV_REPORT_TOKEN_FILE)
        return cls(url, Path(token_file)) if url and token_file else None

    def send(self, report: dict[str, Any]) -> bool:
        """POST one report; True when the operator took it."""
        try:
            # Read each time: the kubelet rotates projected tokens before they expire.
            token = self.token_file.read_text().strip()
            request = urllib.request.Request(
                self.url,
                data=json.dumps(report).encode(),
                headers={"Content-Type": "application/json", "Authorization": f"Bearer {token}"},
                method="POST",
            )
            with urllib.request.urlopen(request, timeout=_TIMEOUT_SECONDS) as response:
                return bool(200 <= response.status < 300)
        except (OSError, urllib.error.URLError, ValueError) as err:
            self._complain(err)
            return False

    def _complain(self, err: Exception) -> None:
        now = time.monotonic()
        if self._complained_at is None or now - self._complained_at >= _COMPLAIN_EVERY_SECONDS:
            self._complained_at = now
            print(f"torchjob: could not report progress to {self.url}: {err}", file=sys.stderr, flush=True)
