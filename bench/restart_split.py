"""Where the time a kill adds to the README's job goes (bench/kill.py): the split #27 asks for.

From the kill of a rank's trainer to the group trained again as far as it had got, in phases read from what the
job leaves (TORCHJOB_HOME's records) and from when lines first appear in the master's log of the next attempt:

- **detection**: kill → the controller tells the survivors to stop (their records' ``stopping_since``);
- **stop**: → the last survivor gone (its exit record, or the backend's record of when it saw it gone);
- **warm start**: → the next attempt's first replica started (its record);
- **rendezvous**: → the master's plan line (printed after ``init``, the group joined, and the data loaded);
- **checkpoint load**: → its "resumed from the checkpoint" line (the DDP model built, the checkpoint read);
- **steps redone**: → it logs the last batch that attempt 0 had logged before the kill (the work lost).
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

PHASES = ("detection", "stop", "warm start", "rendezvous", "checkpoint load", "steps redone")
_BATCH = re.compile(r"epoch: (\d+)/\d+, batch: (\d+)/")


class AttemptWatch:
    """Polled while the next attempt starts: when its master's log first shows each line the split needs."""

    def __init__(self, home: Path, job: str) -> None:
        self.logs = home / "jobs" / job / "logs"
        self.reached: tuple[int, int] | None = None  # (epoch, batch) attempt 0's master had logged at the kill
        self.seen: dict[str, float] = {}

    def at_kill(self) -> None:
        batches = _BATCH.findall(_read(self.logs / "0" / "master-0.log"))
        self.reached = (int(batches[-1][0]), int(batches[-1][1])) if batches else None

    def poll(self) -> None:
        text = _read(self.logs / "1" / "master-0.log")
        now = time.time()
        if "world size" in text:
            self.seen.setdefault("rendezvous", now)
        if "resumed from the checkpoint" in text:
            self.seen.setdefault("checkpoint load", now)
        if self.reached and any((int(e), int(b)) >= self.reached for e, b in _BATCH.findall(text)):
            self.seen.setdefault("steps redone", now)

    @property
    def done(self) -> bool:
        return "steps redone" in self.seen


def split(home: Path, killed_at: float, watch: AttemptWatch, job: str, killed: str = "worker-1") -> dict[str, float]:
    """Seconds per phase (PHASES), for the phases whose end was seen. Survivors that ended on their own (their
    collective failed) before the controller told them have no detection: it is counted in their stop."""
    records = json.loads((home / "jobs" / job / "local.json").read_text())["processes"]
    survivors = [r for r in records if r["attempt"] == 0 and r["replica"] != killed and r["role"] == "replica"]
    ends: dict[str, float] = {}
    told = [r["stopping_since"] for r in survivors if r["stopping_since"] is not None]
    if told:
        ends["detection"] = min(told)
    # A survivor that ended by itself wrote when; one killed with the others (a group restart stops them at once)
    # wrote nothing, and the backend's record says when it saw it gone.
    gone = [_finished_at(Path(r["status_path"])) or r.get("gone_at") for r in survivors]
    if gone and None not in gone:
        ends["stop"] = max(t for t in gone if t is not None)
    started = [r["started_at"] for r in records if r["attempt"] == 1]
    if started:
        ends["warm start"] = min(started)
    ends.update(watch.seen)
    phases, previous = {}, killed_at
    for phase in PHASES:  # a phase whose end was not seen is counted in the next (survivors that ended alone)
        if phase in ends:
            phases[phase] = ends[phase] - previous
            previous = ends[phase]
    return phases


def _finished_at(status: Path) -> float | None:
    try:
        return float(json.loads(status.read_text())["finishedAt"])
    except (OSError, ValueError, KeyError):
        return None


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except OSError:
        return ""
