"""The sharded example across nodes (#51): examples/gpt's in-place variant under plain FSDP, a Pod per node (of one
rank, or of two) and a warm spare on the third, loses a node. No rank but the lost one held its shard: the
survivor's copy of it, kept in its memory and stepped with the lost rank's gradients every step, goes to the spare,
and the job carries on in its first attempt, the survivor's Pod never restarted. With two ranks per Pod each copy
is kept one Pod over (shard_copies.keeper_of), not by the next rank, which went with the same node.
"""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
import yaml

from kuberig import Cluster
from kuberig.node import kubelet
from tests.node.three_nodes import support
from tests.support.mnist_jobs import one_per_node
from tests.support.paths import GPT

STEPS = 1000  # tiny steps (~50 ms across the nodes): the node lost after the 100th, the repair long before the end


def _losses(log: str) -> list[float]:
    return [float(found) for found in re.findall(r"step \d+/\d+: loss ([0-9.]+)", log)]


@pytest.mark.parametrize("per_pod", [1, 2])
def test_a_plain_fsdp_rank_lost_with_its_node_comes_back_from_its_neighbours_copy_on_the_spare(
    three_nodes: Cluster, per_pod: int
) -> None:
    cluster = three_nodes
    support.all_nodes_ready(cluster, timeout=180)
    namespace = cluster.namespace(f"sharded-node-lost-{per_pod}")
    example: dict[str, Any] = yaml.safe_load((GPT / "job-inplace.yaml").read_text())
    args = ["--size", "tiny", "--steps", str(STEPS), "--replicas", "1", "--checkpoint-every", "0"]
    job = one_per_node(example, namespace, [*args, "--log-interval", "50"])
    if per_pod > 1:
        job["spec"]["nprocPerNode"] = str(per_pod)
    name = job["metadata"]["name"]
    cluster.apply(job)
    support.wait_beside_a_spare(cluster, namespace, name, f"{name}-master-0", f"step 100/{STEPS}")
    pods = support.spread(cluster, namespace, name)
    lost, node = pods.lost, pods.node
    kubelet.stop(cluster.state, node)
    stopped = time.monotonic()
    try:
        done = support.succeeded(cluster, namespace, name, timeout=500)
        print(f"{lost}'s node lost; the job succeeded {time.monotonic() - stopped:.1f}s later")
        support.fail_unless_in_place(cluster, namespace, done["status"], repairs=1)
        kept = f"{name}-{pods.survivor}"
        assert pods.carried_on(cluster, namespace, kept)
        logs = "".join(cluster.kubectl("logs", "-n", namespace, pod).stdout for pod in (kept, f"{name}-spare-0-0"))
        print(logs[-2500:])
        # Two Pods: each keeps the other's shards, rank r's copy with rank r + per_pod. The lost Pod's came from the
        # survivor's copies.
        first = 0 if lost == "master-0" else per_pod
        shards = [
            f"rank {r}'s shard from rank {(r + per_pod) % (2 * per_pod)}'s copy" for r in range(first, first + per_pod)
        ]
        said = f"group repaired in place (generation 1, {2 * per_pod} ranks, {'; '.join(shards)})"
        assert said in logs, logs[-3000:]
        assert f"joins as {lost}" in logs, logs[-3000:]
        assert "could not close its old group" not in logs and "built anew" not in logs, logs[-3000:]
        assert f"step {STEPS}/{STEPS}" in logs and "training completed" in logs, logs[-3000:]
        losses = _losses(logs)  # rank 0's: the spare's from the repair on, where the master was lost
        assert losses and losses[-1] < losses[0], losses  # it learned on after the repair
    finally:
        kubelet.start(cluster.state, node)
