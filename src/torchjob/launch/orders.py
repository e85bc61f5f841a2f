"""A Pod's launcher and the operator: what it says of its trainer, and the restart order the operator answers with.

``POST /trainers/<namespace>/<job>`` on the operator's report endpoint (found from ``TORCHJOB_REPORT_URL``,
authenticated with the Pod's report token, as torchjob.train's reports are): ``{"attempt": A}`` while the
trainer of attempt A runs, ``{"attempt": A, "exit_code": C}`` once it ended with C (128+N for signal N). The
answer is ``{}``, or an order for a later attempt (``worker_files.RestartOrder``).
"""

from __future__ import annotations

import json
from pathlib import Path

from torchjob import worker_files
from torchjob.reporting import call_operator, operator_from_env


class TrainerChannel:
    def __init__(self, report_url: str, token_file: Path) -> None:
        self.url = worker_files.operator_endpoint(report_url, "trainers")
        self.token_file = token_file

    @classmethod
    def from_env(cls) -> TrainerChannel | None:
        """The channel in a Pod the operator gave a report endpoint to; None elsewhere."""
        found = operator_from_env()
        return cls(*found) if found else None

    def tell(self, attempt: int, exit_code: int | None) -> worker_files.RestartOrder | None:
        """Say how the trainer of ``attempt`` is (running, or ended with ``exit_code``); the operator's order,
        if it has one for a later attempt (None: none, or the operator could not be reached: asked again)."""
        said: dict[str, int] = {worker_files.TRAINER_ATTEMPT: attempt}
        if exit_code is not None:
            said[worker_files.TRAINER_EXIT_CODE] = exit_code
        try:
            answer = json.loads(call_operator(self.url, self.token_file, said) or b"{}")
        except (OSError, ValueError):
            return None
        order = worker_files.parse_restart_order(answer)
        return order if order is not None and order["attempt"] > attempt else None
