"""Reading a Pod's output before it is deleted, and filing it in its attempt's ConfigMap (``log_archive``).

Best effort by design: output that cannot be read (no container ever ran, the node is gone) or filed (the
API server refused) is skipped. Losing old output must never stop a restart or a repair.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable, Iterable
from typing import Any

import httpx
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import ConfigMap
from lightkube.types import PatchType

from torchjob.api.types import PyTorchJob
from torchjob.backends.kubernetes import fanout, log_archive
from torchjob.core import replicas


class LogKeeper:
    def __init__(
        self, client: Client, count: Callable[[str], None], silent_nodes: Callable[[], Iterable[str]] = tuple
    ) -> None:
        """``count(verb)`` is told of every API request (the operator's request counter); ``silent_nodes()``:
        the nodes known to have stopped reporting, whose Pods' output is not asked for (the API server would try
        their kubelets until its own timeout: seen holding a group restart after a lost node for 10 s)."""
        self.client = client
        self.count = count
        self.silent_nodes = silent_nodes

    def keep(self, job: PyTorchJob, pods: list[tuple[int, str, dict[str, Any]]]) -> None:
        """File each ``(attempt, key, pod)``'s output under ``key`` in that attempt's ConfigMap."""
        by_attempt: dict[int, dict[str, str]] = {}
        silent = set(self.silent_nodes())
        readable = [
            (a, k, p) for a, k, p in pods if _has_run(p) and (p.get("spec") or {}).get("nodeName") not in silent
        ]
        texts = fanout.each([functools.partial(self.read, job, pod, log_archive.TAIL_LINES) for _, _, pod in readable])
        for (attempt, key, _), text in zip(readable, texts, strict=True):
            if text is not None:
                by_attempt.setdefault(attempt, {})[key] = text
        for attempt, logs in by_attempt.items():
            kept = log_archive.manifest(job, attempt, logs)
            self.count("create")
            try:
                self.client.create(ConfigMap.from_dict(kept), namespace=job.namespace)  # type: ignore[no-untyped-call]
            except ApiError as err:
                if err.status.code != 409:
                    continue
                self.count("patch")  # an earlier pass kept other replicas of this attempt
                with contextlib.suppress(ApiError):
                    name, patch = kept["metadata"]["name"], {"binaryData": kept["binaryData"]}
                    self.client.patch(ConfigMap, name, patch, namespace=job.namespace, patch_type=PatchType.MERGE)

    def read(self, job: PyTorchJob, pod: dict[str, Any], lines: int) -> str | None:
        """The last ``lines`` lines of the Pod's trainer container; None when they cannot be read."""
        self.count("get")
        try:
            found = self.client.log(
                pod["metadata"]["name"],
                namespace=job.namespace,
                container=replicas.container_name(job),
                tail_lines=lines,
            )
            return "".join(found)
        except (ApiError, httpx.HTTPError):
            return None


def _has_run(pod: dict[str, Any]) -> bool:
    """Whether a container of the Pod has started (only then is there output to keep)."""
    statuses = (pod.get("status") or {}).get("containerStatuses") or []
    return any((s.get("state") or {}).keys() & {"running", "terminated"} for s in statuses)
