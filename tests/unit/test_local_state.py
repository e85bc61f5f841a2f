"""The local backend's memory of a job's processes (``local.json``): what it writes reads back the same, a file an
earlier torchjob wrote still reads, and a damaged one is named, not a traceback."""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest

from torchjob.backends.local.store import DamagedRecord, JobStore, LocalState, ProcessRecord


def record(replica: str, **extra: Any) -> dict[str, Any]:
    base = {"replica": replica, "attempt": 0, "pid": 4242, "log_path": "l", "status_path": "s", "started_at": 100.0}
    return {**base, **extra}


def stored(tmp_path: Path, processes: Any) -> JobStore:
    store = JobStore(tmp_path)
    folder = store.job_dir("old")
    folder.mkdir(parents=True)
    (folder / "local.json").write_text(json.dumps({"job_file_dir": str(tmp_path), "processes": processes}))
    return store


def test_a_process_is_gone_once_marked_and_reads_back_so(tmp_path: Path) -> None:
    process = ProcessRecord.from_dict(record("worker-0"))
    assert not process.gone and process.gone_at is None
    process.mark_gone()
    seen = process.gone_at
    process.mark_gone()  # the first time it was seen gone stands
    assert process.gone and process.gone_at == seen
    store = JobStore(tmp_path)
    store.job_dir("new").mkdir(parents=True)
    store.write_state("new", LocalState(job_file_dir=str(tmp_path), processes=[process]))
    written = json.loads((store.job_dir("new") / "local.json").read_text())
    assert "removed" not in written["processes"][0]  # one field says it: the time it was seen gone
    assert store.read_state("new").processes == [process]
    assert asdict(store.read_state("new")) == asdict(LocalState(job_file_dir=str(tmp_path), processes=[process]))


def test_a_state_file_of_an_earlier_torchjob_that_says_removed_still_reads(tmp_path: Path) -> None:
    processes = [
        record("master-0", removed=True, gone_at=130.0),
        record("worker-0", removed=True, stopping_since=120.0),  # older still: no time it was seen gone
        record("worker-1", removed=False),
    ]
    state = stored(tmp_path, processes).read_state("old")
    assert [(p.replica, p.gone, p.gone_at) for p in state.processes] == [
        ("master-0", True, 130.0),
        ("worker-0", True, 120.0),
        ("worker-1", False, None),
    ]


@pytest.mark.parametrize("processes", [["worker-0"], [record("worker-0", colour="blue")], [{"replica": "x"}]])
def test_a_damaged_process_record_is_named(tmp_path: Path, processes: Any) -> None:
    with pytest.raises(DamagedRecord, match=r"local\.json: damaged"):
        stored(tmp_path, processes).read_state("old")
