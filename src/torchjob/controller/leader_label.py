"""The Service that Pods report to points at the leader alone: the leader labels its own Pod.

Behind one Service, every ready replica would get a share of each Pod's reports, in-place announcements and
membership polls, and a standby's share never reaches the leader (a spare announces itself once; a silent
replica looks silent to the leader when half its beats land on the standby). So the Service of ``deploy/``
selects ``torchjob.io/operator-leader: "true"``, which the leader puts on its own Pod when it starts to lead
(taking it from any other Pod that still carries it: a leader whose node vanished) and removes on a clean stop.
A standby, unlabelled, hears nothing until it leads. Outside a Pod (``POD_NAME`` unset: an operator run from a
shell) there is nothing to label.
"""

from __future__ import annotations

import contextlib
import logging
import os

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Pod
from lightkube.types import PatchType

LABEL = "torchjob.io/operator-leader"
log = logging.getLogger("torchjob.operator")


def own_pod() -> tuple[str, str] | None:
    """(namespace, name) of the operator's own Pod, from the Downward API's env; None outside a Pod."""
    name, namespace = os.environ.get("POD_NAME"), os.environ.get("POD_NAMESPACE")
    return (namespace, name) if name and namespace else None


def claim(client: Client, pod: tuple[str, str] | None) -> None:
    """Label ``pod`` as the leader and unlabel every other Pod of its namespace that says it leads."""
    if pod is None:
        return
    namespace, name = pod
    try:
        for other in client.list(Pod, namespace=namespace, labels={LABEL: "true"}):
            if other.metadata is not None and other.metadata.name != name:
                _label(client, namespace, str(other.metadata.name), None)
        _label(client, namespace, name, "true")
    except ApiError as err:  # the reports reach no replica until a retry: say so, keep leading
        log.warning("could not label this Pod as the leader (reports go nowhere meanwhile): %s", err)


def release(client: Client, pod: tuple[str, str] | None) -> None:
    """Remove the label on a clean stop, so that reports go to the next leader and not to a stopping one."""
    if pod is not None:
        with contextlib.suppress(ApiError):  # the Pod is going anyway
            _label(client, pod[0], pod[1], None)


def _label(client: Client, namespace: str, name: str, value: str | None) -> None:
    patch = {"metadata": {"labels": {LABEL: value}}}
    client.patch(Pod, name, patch, namespace=namespace, patch_type=PatchType.MERGE)
