"""How many API requests the operator made, by verb: bench/ reports it per job, and the operator's /counters."""

from __future__ import annotations

import threading
from collections import Counter


class RequestCounter:
    """How many API requests the operator made, by verb (reported by bench/)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.by_verb: Counter[str] = Counter()

    def add(self, verb: str, requests: int = 1) -> None:
        with self._lock:
            self.by_verb[verb] += requests

    @property
    def total(self) -> int:
        return sum(self.by_verb.values())
