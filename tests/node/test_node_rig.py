"""The test cluster itself (kuberig) with real nodes: a second cluster of three nodes starts beside the session's;
Pods on different nodes find each other by DNS and train together over gloo; it serves `kubectl exec` and
`logs` from the host, loses a node abruptly and gets it back, revives a node's kubelet that died, and `delete`
(by the cluster's name alone, its state file gone) leaves no process, network namespace, link, cgroup or file
behind."""

from __future__ import annotations

import json
import os
import secrets
import signal
import subprocess
from datetime import datetime, timezone
from pathlib import Path

from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete
from kuberig.images.load import NODE_PYTHON
from kuberig.node import kubelet
from tests.support.cluster_waits import wait_for_pod_phase
from tests.support.images import KUBEFLOW_MNIST
from tests.support.waits import wait_until


def _processes_mentioning(text: str) -> list[str]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in argv:
            found.append(argv)
    return found


def _link_up(name: str) -> bool:
    found = json.loads(subprocess.run(["ip", "-j", "link", "show", name], capture_output=True, text=True).stdout)
    return "UP" in found[0]["flags"]


def _running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its (killed) parent to be replaced by init."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state not in ("Z", "X")


def _routes() -> str:
    return subprocess.run(["ip", "-o", "route"], capture_output=True, text=True, check=True).stdout


def _lease_renewed(cluster: Cluster, name: str) -> datetime:
    """When the node's kubelet last renewed its Lease (kube-node-lease), the heartbeat it sends every 10 s."""
    lease = cluster.kubectl_json("get", "lease", name, "-n", "kube-node-lease")
    return datetime.fromisoformat(lease["spec"]["renewTime"].replace("Z", "+00:00"))


def _node_ready(cluster: Cluster, name: str) -> str:
    conditions = cluster.kubectl_json("get", "node", name)["status"]["conditions"]
    return str(next(c["status"] for c in conditions if c["type"] == "Ready"))


# Rank RANK of a 2-rank gloo group that meets at the headless Service "rank0" (the rank-0 Pod), by its DNS name.
# Rank 0 holds the store and leaves only once rank 1 says it is done: a rank that exits while its peer still
# reads the last message of the collective can have the peer's read fail (a reset connection).
_ALL_REDUCE = (
    "import os, torch, torch.distributed as dist; rank = int(os.environ['RANK']); "
    "dist.init_process_group('gloo', init_method='tcp://rank0.default.svc.cluster.local:29500', "
    "rank=rank, world_size=2, timeout=__import__('datetime').timedelta(seconds=90)); "
    "print('rank', rank, 'joined', flush=True); "
    "t = torch.ones(1); dist.all_reduce(t); print('all_reduce', t.item(), 'on', os.environ['NODE'], flush=True); "
    "store = dist.distributed_c10d._get_default_store(); "
    "store.set('done', '1') if rank else store.wait(['done']); "
    "dist.destroy_process_group()"
)


def _rank_pod(rank: int, node: str) -> dict[str, object]:
    env = [{"name": "RANK", "value": str(rank)}, {"name": "NODE", "value": node}]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"rank{rank}-pod", "namespace": "default", "labels": {"app": f"rank{rank}"}},
        "spec": {
            "nodeName": node,  # one rank per node: the group's traffic crosses between nodes
            "restartPolicy": "Never",
            "containers": [
                {"name": "c", "image": KUBEFLOW_MNIST, "command": ["python3", "-c", _ALL_REDUCE], "env": env}
            ],
        },
    }


def _pods_on_two_nodes_train_together(second: Cluster) -> None:
    first, other = second.kubelet_nodes()[1:3]
    second.apply(
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "rank0", "namespace": "default"},
            # As torchjob's own headless Services: the name resolves as soon as the Pod has an address.
            "spec": {
                "clusterIP": "None",
                "selector": {"app": "rank0"},
                "ports": [{"port": 29500}],
                "publishNotReadyAddresses": True,
            },
        }
    )
    second.apply(_rank_pod(0, first.name))
    second.apply(_rank_pod(1, other.name))
    try:
        for rank in (0, 1):
            wait_for_pod_phase(second, "default", f"rank{rank}-pod", "Succeeded", timeout=240)
    finally:  # on a failure, what each rank said is the first thing to read
        logs = {rank: second.kubectl("logs", f"rank{rank}-pod", check=False).stdout for rank in (0, 1)}
        print("rank logs:", logs)
    assert f"all_reduce 2.0 on {first.name}" in logs[0], logs
    assert f"all_reduce 2.0 on {other.name}" in logs[1], logs


def test_a_second_cluster_of_three_nodes_connects_their_pods_serves_exec_and_logs_loses_a_node_and_leaves_nothing(
    cluster: Cluster, tmp_path: Path
) -> None:
    directory = tmp_path / "second"
    name = f"second-{secrets.token_hex(3)}"
    second = create(ClusterConfig(name, (NodeConfig("kubelet", 3),)), directory)
    node = second.kubelet_nodes()[0]
    slots = [n.slot for n in second.kubelet_nodes()]
    try:
        assert len(set(slots)) == 3 and cluster.kubelet_nodes()[0].slot not in slots  # their own namespaces
        assert sorted(_node_ready(second, n.name) for n in second.kubelet_nodes()) == ["True"] * 3
        second.push_image(KUBEFLOW_MNIST, {**NODE_PYTHON})
        _pods_on_two_nodes_train_together(second)
        second.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "sleeper", "namespace": "default"},
                "spec": {
                    "nodeName": node.name,
                    "containers": [
                        {"name": "c", "image": KUBEFLOW_MNIST, "command": ["sh", "-c", "echo up; sleep 600"]}
                    ],
                },
            }
        )
        wait_for_pod_phase(second, "default", "sleeper", "Running", timeout=120)
        exec_ = second.kubectl("exec", "sleeper", "--", "python3", "-c", "import torch; print(6 * 7)")
        assert exec_.stdout.strip() == "42"
        assert second.kubectl("logs", "sleeper").stdout.strip() == "up"

        # The node vanishes: its link goes down and every process of it dies at once, the namespace stays.
        container = second.container_pids("default", "sleeper", "c")
        kubelet.stop(second.state, node)
        assert not _link_up(node.slot.host_veth)
        # Its addresses go nowhere, in silence: never to the host's default route, out of this machine.
        for subnet in (node.slot.link_subnet, node.slot.pod_subnet):
            assert f"blackhole {subnet}" in _routes(), _routes()
        assert container and not any(_running(pid) for pid in container)
        assert Path(f"/run/netns/{node.slot.name}").exists()
        # ... and comes back: kubelet reports again, the node is Ready.
        kubelet.start(second.state, node)
        assert _link_up(node.slot.host_veth)
        assert f"{node.slot.pod_subnet} via {node.slot.node_ip}" in _routes()  # its Pods are reachable again
        assert f"blackhole {node.slot.pod_subnet}" not in _routes()
        wait_until(lambda: _node_ready(second, node.name) == "True", 120, "the node Ready again", every=1)

        # Its kubelet dies alone: the rig names it exited, and revives it (as a node's init system would), and
        # the revived kubelet renews the node's Lease again.
        os.kill(second.state.process(node.process_name("kubelet")).pid, signal.SIGKILL)
        exited = lambda: kubelet.exited(second.state, node)  # noqa: E731
        wait_until(lambda: exited() == ["kubelet"], 30, "the rig to name the kubelet exited", detail=exited)
        revived_at = datetime.now(timezone.utc)
        assert kubelet.revive(second.state, node) == ["kubelet"]
        assert kubelet.exited(second.state, node) == [] and kubelet.revive(second.state, node) == []
        wait_until(
            lambda: _lease_renewed(second, node.name) > revived_at, 120, "the revived kubelet's renewal", every=1
        )
    finally:
        (directory / "state.json").unlink(missing_ok=True)  # delete must find everything by the name alone
        delete(name, directory)
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    routes = _routes()
    for slot in slots:
        assert not Path(f"/run/netns/{slot.name}").exists() and not slot.short_dir.exists()
        assert slot.host_veth not in links and slot.pod_subnet not in routes
        assert not list(Path("/sys/fs/cgroup").glob(f"*/{slot.name}"))
    assert not _processes_mentioning(str(directory))
    assert not directory.exists()
    assert Path(f"/run/netns/{cluster.kubelet_nodes()[0].slot.name}").exists()  # the other cluster was left alone
