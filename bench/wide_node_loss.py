"""One of the 64 nodes under a job of 1,024 replicas vanishes: how soon the deployed operator decides.

The job and its reports as in ``bench/report_load.py`` (1,024 replicas on 64 kwok nodes, each reporting every second
over the real report channel). After the first reports' TokenReviews, one node vanishes as a host does: nothing
answers at its address any more (``kuberig``'s simulated nodes have addresses of their own, ``Cluster.vanish``), and
its replicas' reports stop (the scheduler spreads the job unevenly: a few to some fifty a node); the others keep
beating but step no more (they wait in a collective for the lost ones). Its Lease goes on being renewed (kwok renews
it): the operator must find the loss from the replicas' silence and its own probe of the node. Measured: seconds
from the vanishing until the job's status says a replica of that node was lost with it. Each trial is a new job in
a new namespace, deleted after it, the node brought back.
"""

from __future__ import annotations

import json
import random
import time
from collections import defaultdict
from typing import Any

from lightkube import Client, KubeConfig

from bench import cluster_kit
from bench.records import Run
from bench.report_load import PyTorchJobs, Replica, reporting
from kuberig import Cluster

DECIDED_WITHIN = 60.0  # a trial's window: the Lease (40 s here, renewed all along) never decides it


def record(run: Run, cluster: Cluster, trials: int, job: dict[str, Any], count: int) -> None:
    name = job["metadata"]["name"]
    client = Client(KubeConfig.from_file(str(cluster.kubeconfig)))
    for trial in range(trials):
        namespace = f"node-loss-{trial}"
        pods, replicas, generator = reporting(cluster, client, namespace, job, count)
        on_node: dict[str, list[Replica]] = defaultdict(list)
        for pod, replica in zip(pods, replicas, strict=True):
            on_node[pod["spec"]["nodeName"]].append(replica)
        node = random.choice([n for n, held in on_node.items() if all(r.name != "master-0" for r in held)])
        lost = on_node[node]
        vanished = time.time()
        cluster.vanish(node)
        generator.group.frozen_at = vanished
        for replica in lost:
            replica.frozen = True
        try:
            decided = _decided_at(client, namespace, name, {r.name for r in lost}, vanished + DECIDED_WITHIN)
        finally:
            generator.stop()
            cluster.mend(node)
        late = None if decided is None else decided - vanished
        run.keep("vanished node decided", late)
        print(
            f"  trial {trial + 1}: {node} vanished with {len(lost)} replicas; "
            + (f"the job decided {late:.2f} s later" if late is not None else "never decided"),
            flush=True,
        )
        cluster_kit.delete_namespace(cluster, namespace)


def _decided_at(client: Client, namespace: str, job: str, lost: set[str], deadline: float) -> float | None:
    """Wall clock when the job's status first says one of ``lost`` was lost with its node; None if not by
    ``deadline``."""
    while time.time() < deadline:
        status = json.dumps(client.get(PyTorchJobs, job, namespace=namespace).get("status") or {})
        if any(f"{replica} was lost with its node" in status for replica in lost):
            return time.time()
        time.sleep(0.05)
    return None
