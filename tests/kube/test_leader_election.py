"""Two operator replicas with leader election on the cluster: one acts, the other stands by and takes over."""

from __future__ import annotations

from pathlib import Path

from kuberig import Cluster
from tests.support.cluster_jobs import job_manifest, running_pods
from tests.support.operator import OperatorProcess
from tests.support.waits import wait_until

# Jobs of this test name this value, so the session's own operator (which does not answer to it) ignores them.
MANAGED_BY = "torchjob.io/election-test"


def test_only_the_lease_holder_acts_and_a_standby_takes_over_when_it_dies(
    cluster: Cluster, namespace: str, operator: OperatorProcess, tmp_path: Path
) -> None:
    args = ("-n", namespace, "--leader-elect", "--lease-namespace", "torchjob-system", "--managed-by", MANAGED_BY)
    first, second = (OperatorProcess(operator.kubeconfig, tmp_path / f"op{i}.log", args) for i in range(2))
    first.start()
    wait_until(lambda: first.counters()["leader"], what="the first replica to lead")
    second.start()  # ready at once: a standby
    try:
        cluster.apply(job_manifest("led", workers=1, run_policy={"managedBy": MANAGED_BY}), namespace)
        wait_until(lambda: len(running_pods(cluster, namespace, "led")) == 2, what="the leader to create the pods")
        standby = second.counters()
        assert standby["leader"] is False and standby["requests"] == {}  # it has touched nothing

        first.kill()  # the leader's node is gone: no chance to release the lease
        cluster.apply(job_manifest("after", workers=1, run_policy={"managedBy": MANAGED_BY}), namespace)
        wait_until(lambda: len(running_pods(cluster, namespace, "after")) == 2, timeout=60, what="the standby to act")
        assert second.counters()["leader"] is True
        lease = cluster.kubectl_json("get", "-n", "torchjob-system", "lease", "torchjob-operator")["spec"]
        assert lease["leaseTransitions"] >= 1 and lease["holderIdentity"]
    finally:
        first.kill()
        second.stop()
    # A leader that stops cleanly gives the lease up at once.
    released = cluster.kubectl_json("get", "-n", "torchjob-system", "lease", "torchjob-operator")["spec"]
    assert not released.get("holderIdentity")
