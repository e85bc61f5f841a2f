"""Who is reporting: a Pod's projected report token, reviewed by the API server (TokenReview).

A Pod proves who it is with its projected service-account token (audience ``worker_files.REPORT_AUDIENCE``,
so the token opens nothing on the API server). A TokenReview turns it into the Pod's namespace, name and uid,
as the API server signed them.

Reviews are cached by token digest for a few minutes (Kubeflow's KEP-2779 asks the same), so a job of many Pods
reporting every second costs the API server one review per Pod per token, not one per report. When a cached
review runs out, the API server is asked again; if it cannot answer then (throttled, a timeout, a loopback
lookup of the Pod that failed under load), the identity it vouched for stands a while longer. A failed review is
not a silent Pod: taking it for one would stop hearing a healthy Pod for minutes, and call it hung.
"""

from __future__ import annotations

import hashlib
import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Protocol

import httpx
from lightkube import ApiError, Client
from lightkube.models.authentication_v1 import TokenReviewSpec, TokenReviewStatus
from lightkube.resources.authentication_v1 import TokenReview

from torchjob import worker_files

log = logging.getLogger("torchjob.operator")

_POD_NAME = "authentication.kubernetes.io/pod-name"
_POD_UID = "authentication.kubernetes.io/pod-uid"
_SERVICE_ACCOUNT_PREFIX = "system:serviceaccount:"
FRESH_SECONDS = 300.0
# How long past FRESH_SECONDS a review still stands while the API server cannot review the token again.
STANDS_SECONDS = 600.0
# A token the API server refused, or one it could not review again: asked again after this long.
ASK_AGAIN_SECONDS = 10.0
_CACHE_SIZE = 10_000


@dataclass(frozen=True)
class PodIdentity:
    namespace: str
    name: str
    uid: str


class ReviewUnavailable(Exception):
    """The API server could not review a token now, and no earlier review of it stands."""


class TokenReviewer(Protocol):
    def review(self, token: str) -> PodIdentity | None:
        """The Pod a report token was issued to, or None when it is not a valid report token of a Pod. Raises
        ReviewUnavailable when that cannot be known now."""
        ...


@dataclass(frozen=True)
class _Review:
    identity: PodIdentity | None
    fresh_until: float
    stands_until: float


class ApiTokenReviewer:
    """TokenReview through the API server (RBAC: create tokenreviews), cached by token digest."""

    def __init__(self, client: Client, clock: Callable[[], float] = time.monotonic) -> None:
        self.client = client
        self.clock = clock
        self._lock = threading.Lock()
        self._cache: dict[str, _Review] = {}

    def review(self, token: str) -> PodIdentity | None:
        digest = hashlib.sha256(token.encode()).hexdigest()
        now = self.clock()
        with self._lock:
            cached = self._cache.get(digest)
        if cached is not None and cached.fresh_until > now:
            return cached.identity
        standing = cached if cached is not None and cached.identity is not None and cached.stands_until > now else None
        try:
            identity = self._ask(token)
        except (ApiError, httpx.HTTPError) as err:
            if standing is None:
                raise ReviewUnavailable(f"the API server could not review a report token: {err}") from err
            log.debug("report token of %s: review failed (%s); the last review stands", standing.identity, err)
            return self._stand(digest, standing, now)
        if identity is None and standing is not None:
            # Refused now, vouched for before: under load the API server's own lookup of the Pod can fail. A Pod
            # that is really gone reports into nothing (its uid matches no Pod the operator observes).
            log.debug("report token of %s: refused on review; the last review stands", standing.identity)
            return self._stand(digest, standing, now)
        if identity is None:
            self._keep(digest, _Review(None, now + ASK_AGAIN_SECONDS, now + ASK_AGAIN_SECONDS))
        else:
            self._keep(digest, _Review(identity, now + FRESH_SECONDS, now + FRESH_SECONDS + STANDS_SECONDS))
        return identity

    def _stand(self, digest: str, standing: _Review, now: float) -> PodIdentity | None:
        """Keep an earlier review a while longer, asking again only after ASK_AGAIN_SECONDS (not per report)."""
        self._keep(digest, replace(standing, fresh_until=min(now + ASK_AGAIN_SECONDS, standing.stands_until)))
        return standing.identity

    def _keep(self, digest: str, review: _Review) -> None:
        with self._lock:
            if len(self._cache) >= _CACHE_SIZE:
                now = self.clock()
                self._cache = {k: v for k, v in self._cache.items() if v.stands_until > now}
            self._cache[digest] = review

    def _ask(self, token: str) -> PodIdentity | None:
        body = TokenReview(spec=TokenReviewSpec(token=token, audiences=[worker_files.REPORT_AUDIENCE]))
        return pod_identity(self.client.create(body).status)


def pod_identity(status: TokenReviewStatus | None) -> PodIdentity | None:
    """The Pod a review's answer names, for a report token bound to a Pod; None for anything else."""
    if status is None or not status.authenticated or status.user is None:
        return None
    if worker_files.REPORT_AUDIENCE not in (status.audiences or []):
        return None
    username = status.user.username or ""
    extra = status.user.extra or {}
    names, uids = extra.get(_POD_NAME) or [], extra.get(_POD_UID) or []
    if not username.startswith(_SERVICE_ACCOUNT_PREFIX) or not names or not uids:
        return None  # a token, but not one bound to a Pod
    namespace = username[len(_SERVICE_ACCOUNT_PREFIX) :].split(":", 1)[0]
    return PodIdentity(namespace, names[0], uids[0])
