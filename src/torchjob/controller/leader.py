"""Leader election on a ``coordination.k8s.io/v1`` Lease, so that several operator replicas can run and
exactly one of them acts (client-go's ``leaderelection`` protocol, which kube-controller-manager uses).

The holder renews the Lease every ``renew_seconds``. A candidate takes it over once it has seen the same
record unchanged for ``lease_seconds``, timed on its own monotonic clock, so clock skew between machines
does not matter. Every write carries the ``resourceVersion`` it read, so two candidates can never both win.
A leader that cannot renew within ``renew_deadline_seconds`` must stop acting at once (the caller exits);
a leader that stops cleanly releases the Lease, so a standby takes over without waiting for it to expire.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from datetime import datetime, timezone

from lightkube import ApiError, Client
from lightkube.models.coordination_v1 import LeaseSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.coordination_v1 import Lease

log = logging.getLogger("torchjob.operator.leader")


@dataclass(frozen=True)
class ElectionSettings:
    namespace: str
    name: str = "torchjob-operator"
    lease_seconds: int = 15
    renew_deadline_seconds: float = 10.0
    renew_seconds: float = 2.0


class LeaseLock:
    def __init__(self, client: Client, settings: ElectionSettings, identity: str) -> None:
        self.client = client
        self.settings = settings
        self.identity = identity
        # The last record seen and when (monotonic): the basis for "expired", immune to clock skew.
        self._observed: tuple[str | None, object] | None = None
        self._observed_at = 0.0

    def try_acquire_or_renew(self) -> bool:
        """One attempt: True when this candidate holds the Lease afterwards."""
        now = datetime.now(timezone.utc)
        try:
            lease = self.client.get(Lease, self.settings.name, namespace=self.settings.namespace)
        except ApiError as err:
            if err.status.code != 404:
                raise
            return self._create(now)
        spec = lease.spec or LeaseSpec()
        record = (spec.holderIdentity, spec.renewTime)
        if record != self._observed:
            self._observed, self._observed_at = record, time.monotonic()
        held_by_other = bool(spec.holderIdentity) and spec.holderIdentity != self.identity
        expired = time.monotonic() - self._observed_at >= (spec.leaseDurationSeconds or self.settings.lease_seconds)
        if held_by_other and not expired:
            return False
        if spec.holderIdentity != self.identity:
            spec.acquireTime = now
            spec.leaseTransitions = (spec.leaseTransitions or 0) + 1
            log.info("taking the lease %s over from %r", self.settings.name, spec.holderIdentity or "nobody")
        spec.holderIdentity = self.identity
        spec.renewTime = now
        spec.leaseDurationSeconds = self.settings.lease_seconds
        lease.spec = spec
        return self._write(lease)

    def release(self) -> None:
        """Give the Lease up (a clean stop), so a standby need not wait for it to expire."""
        try:
            lease = self.client.get(Lease, self.settings.name, namespace=self.settings.namespace)
        except ApiError:
            return
        if lease.spec is None or lease.spec.holderIdentity != self.identity:
            return
        lease.spec.holderIdentity = None
        lease.spec.leaseDurationSeconds = 1
        self._write(lease)

    def _create(self, now: datetime) -> bool:
        spec = LeaseSpec(
            holderIdentity=self.identity,
            leaseDurationSeconds=self.settings.lease_seconds,
            acquireTime=now,
            renewTime=now,
            leaseTransitions=0,
        )
        lease = Lease(metadata=ObjectMeta(name=self.settings.name, namespace=self.settings.namespace), spec=spec)
        try:
            self.client.create(lease)
        except ApiError as err:
            if err.status.code == 409:  # another candidate created it first
                return False
            raise
        return True

    def _write(self, lease: Lease) -> bool:
        try:
            self.client.replace(lease)
        except ApiError as err:
            if err.status.code == 409:  # someone wrote it since we read it: not ours this time
                return False
            raise
        return True
