"""Independent API requests made side by side: a group restart's N Pod deletes, or the N logs read before them,
take about N / ``WIDTH`` round trips instead of N (Kubernetes' own Job controller creates and deletes a Job's Pods
in parallel too). One after another, the status that says why a group of 1,024 restarts would wait for 2,048
round trips.

Only the requests go to the pool: whatever a request needs from the pass (its Pod, read from the pass's observation,
which is per thread) is worked out by the caller first.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")

# Requests in flight at once for one pass: enough to hide round trips, few enough that the API server's fairness
# queues for the operator's service account are not what it waits on.
WIDTH = 8


def each(calls: Sequence[Callable[[], T]]) -> list[T]:
    """Every call's result, in order. All of them run, whatever one raises; then the first error is raised."""
    if len(calls) <= 1:
        return [call() for call in calls]
    with ThreadPoolExecutor(max_workers=min(WIDTH, len(calls)), thread_name_prefix="api-fanout") as pool:
        futures = [pool.submit(call) for call in calls]
    errors = [f.exception() for f in futures if f.exception() is not None]
    if errors:
        raise errors[0]  # type: ignore[misc]
    return [f.result() for f in futures]
