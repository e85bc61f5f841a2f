"""Pods of a job that would hold it up for good, found each pass and removed by force before it is observed.

- A Pod whose deletion was decided, on a node that stopped reporting: no kubelet will confirm its stop
  (``nodes.never_finishing``).
- A spare, or the rendezvous store, that torchjob kept off a node which now reports again, and that the scheduler
  cannot place elsewhere (``nodes.kept_off_needlessly``): nobody waits on it yet, so a new one is made.
- The rendezvous store on a node that stopped reporting: a formed group trains without it, but its next
  re-forming needs one that answers; the planner creates it again, elsewhere, under its name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torchjob.backends.kubernetes import observing
from torchjob.backends.kubernetes.nodes import kept_off_needlessly, never_finishing
from torchjob.core import replicas
from torchjob.core.observed import SilentNode


def clear_the_way(
    owned: list[dict[str, Any]],
    silent: dict[str, SilentNode],
    avoided: dict[str, SilentNode],
    store_name: str,
    delete_by_force: Callable[[str], None],
) -> list[dict[str, Any]]:
    """Remove what holds the job up (see above) through ``delete_by_force(name)``; the Pods left to observe."""
    for stuck in never_finishing(owned, silent):
        delete_by_force(stuck["metadata"]["name"])
    left = []
    for pod in owned:
        helper = observing.role_of(pod) in (replicas.ROLE_STORE, replicas.ROLE_SPARE)
        on_silent_node = (pod.get("spec") or {}).get("nodeName") in silent
        lost_store = pod["metadata"]["name"] == store_name and on_silent_node
        if (helper and kept_off_needlessly(pod, avoided)) or (
            lost_store and not pod["metadata"].get("deletionTimestamp")
        ):
            delete_by_force(pod["metadata"]["name"])
            continue
        left.append(pod)
    return left
