"""A planner's Event as a ``core/v1`` Event on its job, so that ``kubectl describe`` and ``kubectl events`` show it."""

from __future__ import annotations

import secrets
from datetime import datetime
from typing import Any

from torchjob.backends.kubernetes import crd
from torchjob.core.actions import Event
from torchjob.core.times import timestamp

COMPONENT = "torchjob-operator"
# The API server refuses longer messages.
_MAX_MESSAGE = 1024


def event_manifest(namespace: str, name: str, uid: str | None, event: Event, now: datetime) -> dict[str, Any]:
    """The Event about the job ``namespace/name`` (``uid``), of a name of its own."""
    at = timestamp(now)
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"name": f"{name}.{secrets.token_hex(8)}", "namespace": namespace},
        "involvedObject": {
            "apiVersion": f"{crd.GROUP}/{crd.VERSION}",
            "kind": crd.KIND,
            "name": name,
            "namespace": namespace,
            "uid": uid,
        },
        "type": event.type,
        "reason": event.reason,
        "message": event.message[:_MAX_MESSAGE],
        "source": {"component": COMPONENT},
        "reportingComponent": COMPONENT,
        "firstTimestamp": at,
        "lastTimestamp": at,
        "count": 1,
    }
