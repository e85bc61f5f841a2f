"""Pods of a job that would hold it up for good, found each pass; the planner removes them by force
(``core/policies/stuck.py``).

- A Pod whose deletion was decided, on a node that stopped reporting: no kubelet will confirm its stop
  (``nodes.never_finishing``).
- A spare, or the rendezvous store, that torchjob kept off a node which now reports again, and that the scheduler
  cannot place elsewhere (``nodes.kept_off_needlessly``): nobody waits on it yet, so a new one is made.
- The rendezvous store on a node that stopped reporting: a formed group trains without it, but its next
  re-forming needs one that answers; the planner creates it again, elsewhere, under its name.
- A warm spare on a node that stopped reporting: its Pod still looks Running, and a lost member's place given to
  it would wait for a joiner that never comes (the group restarts once it is named hung). Left out, it is no
  spare: a member lost with that node waits for a new one, made on a node that reports.
"""

from __future__ import annotations

from typing import Any

from torchjob.backends.kubernetes import observing
from torchjob.backends.kubernetes.nodes import kept_off_needlessly, never_finishing
from torchjob.core import replicas
from torchjob.core.observed import SilentNode, StuckPod


def find_stuck(
    owned: list[dict[str, Any]],
    silent: dict[str, SilentNode],
    avoided: dict[str, SilentNode],
    store_name: str,
) -> tuple[list[StuckPod], list[dict[str, Any]]]:
    """The stuck Pods (see above), and the Pods left to observe: a stuck helper is left out (the planner makes
    another), a stuck replica stays, seen stopping."""
    found = [
        StuckPod(pod["metadata"]["name"], "its deletion was decided and its node stopped reporting", False)
        for pod in never_finishing(owned, silent)
    ]
    left = []
    for pod in owned:
        name = pod["metadata"]["name"]
        role = observing.role_of(pod)
        helper = role in (replicas.ROLE_STORE, replicas.ROLE_SPARE)
        # One being deleted already is a Pod whose deletion was decided (above, once its grace period is over).
        lost = (pod.get("spec") or {}).get("nodeName") in silent and not pod["metadata"].get("deletionTimestamp")
        if helper and kept_off_needlessly(pod, avoided):
            why = "it was kept off a node that reports again, and fits nowhere else"
        elif lost and name == store_name:
            why = "the rendezvous store's node stopped reporting"
        elif lost and role == replicas.ROLE_SPARE:
            why = "the spare's node stopped reporting: it can take no place"
        else:
            left.append(pod)
            continue
        found.append(StuckPod(name, why, True))  # never one of the above: those are on a node, being deleted
    return found, left
