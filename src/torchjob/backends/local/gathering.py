"""One local replica process as the planner sees it: the facts gathered from what it and torchjob wrote (its
shim's exit record, the preemption notices, heartbeats and in-place announcements in the job's output folder,
the last lines of its log), handed to the pure classifier (``observing.py``)."""

from __future__ import annotations

from pathlib import Path

from torchjob import worker_files
from torchjob.backends.local import membership, observing, outputs
from torchjob.backends.local.launching import error_file
from torchjob.backends.local.logs import failure_summary
from torchjob.backends.local.shim import ExitRecord
from torchjob.backends.local.store import ProcessRecord
from torchjob.core.observed import ReplicaObservation
from torchjob.core.replicas import parse_replica_name


def observe_record(output: Path, record: ProcessRecord, ended: ExitRecord | None) -> ReplicaObservation:
    """``record``'s replica process of the job whose output folder is ``output``; ``ended`` None while it runs."""
    replica = parse_replica_name(record.replica)
    assert replica is not None, record.replica  # only replicas' records are observed
    notices = outputs.notice_times(output, record.replica)
    reports = outputs.heartbeats(output, record.replica, since=record.started_at)
    failed = ended is not None and (ended.signal is not None or ended.exit_code != 0)
    log = Path(record.log_path)
    return observing.observe_process(
        replica,
        record.attempt,
        ended,
        stopping=record.stopping_since is not None,
        notice_at=observing.preemption_onset(notices, record.started_at),
        # A replica that succeeded keeps its last report: a short job may end between two passes.
        progress=observing.slowest(reports) if ended is None or not failed else None,
        message=failure_summary(log, error_file=error_file(log)) if failed else None,
        member=membership.announcement(output, worker_files.process_key(record.replica, 0, 0), record.attempt),
    )
