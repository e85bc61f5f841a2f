"""The sharded example across nodes (#51): examples/gpt's in-place variant under plain FSDP, a Pod of two ranks per
node and a warm spare Pod on the third, loses a node. No rank but the lost ones held their shards: the surviving
Pod's copies of them, kept in its memory and stepped with the lost ranks' gradients every step, go to the spare,
and the job carries on in its first attempt, the survivor's Pod never restarted. Each copy is kept one Pod over
(shard_copies.keeper_of), not by the next rank, which went with the same node. (A rank per Pod, the copy kept by
the next rank, is the same path with a stride of one: tests/integration/test_gpt_example.py and bench.state.)
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
from tests.support.cluster_waits import wait_beside_a_spare
from tests.support.mnist_jobs import one_per_node
from tests.support.paths import GPT

# Tiny steps (0.1–0.5 s across the nodes), the node lost after the 100th. The survivors cannot step without the lost
# ranks until the spare holds their shards, so the repair always comes before the end: the 100 steps after the 100th
# need only outlast the time between the test reading step 100 in the log and stopping the node (seconds).
STEPS = 200
PER_POD = 2


def _losses_above_the_floor(log: str) -> list[float]:
    """What each progress line of rank 0 says its loss is above the least the generated language allows."""
    lines = re.findall(r"step \d+/\d+: loss ([0-9.]+) \(floor ([0-9.]+)\)", log)
    return [float(loss) - float(floor) for loss, floor in lines]


@pytest.mark.heavy(
    twin="tests/integration/test_gpt_example.py::test_plain_fsdp_in_place_loses_a_replica_and_the_neighbours_copies_make_the_group_whole[stepped-two-per-replica]"
)
def test_a_plain_fsdp_pod_lost_with_its_node_comes_back_from_the_copies_one_pod_over_on_the_spare(
    three_nodes: Cluster,
) -> None:
    cluster = three_nodes
    support.all_nodes_ready(cluster, timeout=180)
    namespace = cluster.namespace("sharded-node-lost")
    example: dict[str, Any] = yaml.safe_load((GPT / "job-inplace.yaml").read_text())
    args = ["--size", "tiny", "--steps", str(STEPS), "--replicas", "1", "--checkpoint-every", "0"]
    job = one_per_node(example, namespace, [*args, "--log-interval", "50"])
    job["spec"]["nprocPerNode"] = str(PER_POD)
    name = job["metadata"]["name"]
    cluster.apply(job)
    wait_beside_a_spare(cluster, namespace, name, f"{name}-master-0", f"step 100/{STEPS}")
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
        # Two Pods: each keeps the other's shards, rank r's copy with rank r + PER_POD. The lost Pod's came from the
        # survivor's copies.
        first = 0 if lost == "master-0" else PER_POD
        shards = [
            f"rank {r}'s shard from rank {(r + PER_POD) % (2 * PER_POD)}'s copy" for r in range(first, first + PER_POD)
        ]
        said = f"group repaired in place (generation 1, {2 * PER_POD} ranks, {'; '.join(shards)})"
        assert said in logs, logs[-3000:]
        assert f"joins as {lost}" in logs, logs[-3000:]
        assert "could not close its old group" not in logs and "built anew" not in logs, logs[-3000:]
        assert f"step {STEPS}/{STEPS}" in logs and "training completed" in logs, logs[-3000:]
        # The group went on from the state it had, not from a fresh model's: rank 0 (the spare, where the master was
        # lost) says from the repair on (every 50 steps) a loss within 0.5 of the floor, as an uninterrupted run does
        # from step 150 on; a fresh model is still ~1.9 above it 50 steps in.
        after = logs[logs.index(said) :]
        above = _losses_above_the_floor(after)
        assert len(above) >= 2 and max(above) < 0.5, after[-3000:]
    finally:
        kubelet.start(cluster.state, node)
