"""What the dashboard shows, shaped from a job's wire form and records: pure functions, no I/O."""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Any

from torchjob.sdk.summary import JobSummary, last_condition

# A chart keeps at most this many points per rank (every n-th record): a long job stays light to draw.
MAX_POINTS = 2000


def job_row(summary: JobSummary) -> dict[str, Any]:
    """One line of the job list, as the page's table and its JSON show it."""
    return {
        "name": summary.name,
        "state": summary.state or "Created",
        "progress": summary.progress,
        "age_seconds": round(summary.age_seconds, 1),
        "attempt": summary.attempt,
        "restarts": summary.restarts,
        "message": summary.message,
    }


def job_detail(wire: dict[str, Any], now: datetime | None = None) -> dict[str, Any]:
    """The job's header, timeline and replica names, from its wire form (``torchjob get -o json``)."""
    now = now or datetime.now(timezone.utc)
    status = wire.get("status") or {}
    condition = last_condition(wire)
    trainer = status.get("trainerStatus") or {}
    replicas = []
    for kind, spec in (wire.get("spec") or {}).get("pytorchReplicaSpecs", {}).items():
        replicas += [f"{kind.lower()}-{i}" for i in range(int(spec.get("replicas", 1) or 0))]
    return {
        "name": (wire.get("metadata") or {}).get("name", ""),
        "namespace": (wire.get("metadata") or {}).get("namespace", ""),
        "state": condition.get("type", "Created"),
        "message": condition.get("message", ""),
        "attempt": status.get("attempt", 0),
        "restarts": status.get("restartCount", 0),
        "repairs": status.get("repairs", 0),
        "membership_changes": status.get("membershipChanges", 0),
        "progress": trainer.get("progressPercentage"),
        "remaining_seconds": trainer.get("estimatedRemainingSeconds"),
        "metrics": {m.get("name"): m.get("value") for m in trainer.get("metrics") or []},
        "timeline": timeline(status, now),
        "replicas": replicas,
    }


def timeline(status: dict[str, Any], now: datetime) -> list[dict[str, Any]]:
    """Each attempt as a span (start, end, how it ended), and each repair in place as a point on its attempt."""
    spans = []
    for record in status.get("attempts") or []:
        end = record.get("endTime")
        outcome = record.get("outcome") or ("running" if end is None else "")
        spans.append(
            {
                "attempt": record.get("attempt", 0),
                "start": record.get("startTime"),
                "end": end or now.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "ended": end is not None,
                "outcome": outcome,
                # The root cause's first clause (the outcome goes on with the replica's last lines): the bar's label.
                "cause": outcome.split(": ", 1)[0][:80],
                "kind": "succeeded" if outcome == "succeeded" else "running" if end is None else "failed",
                "repaired": record.get("repairedTime"),
            }
        )
    return spans


def chart_series(ranks: dict[int, list[dict[str, Any]]]) -> dict[str, Any]:
    """One curve per rank and attempt (a restarted group starts again from its checkpoint's step): steps, loss
    and samples/s, thinned to at most MAX_POINTS points each. Keys: ``rank 1`` (one attempt) or
    ``attempt 0 · rank 1``."""
    by_curve: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for rank, records in ranks.items():
        for record in records:
            by_curve.setdefault((int(record.get("attempt", 0)), rank), []).append(record)
    attempts = {attempt for attempt, _ in by_curve}
    series = {}
    for (attempt, rank), records in sorted(by_curve.items()):
        stride = max(1, -(-len(records) // MAX_POINTS))
        kept = records[::stride]
        if kept[-1] is not records[-1]:
            kept.append(records[-1])  # always show where the rank is now
        name = f"rank {rank}" if len(attempts) == 1 else f"attempt {attempt} · rank {rank}"
        series[name] = {
            "step": [r.get("step") for r in kept],
            "loss": [r.get("loss") for r in kept],
            "samples_per_second": [r.get("samples_per_second") for r in kept],
        }
    return series
