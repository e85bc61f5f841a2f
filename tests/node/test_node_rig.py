"""The test cluster itself (kuberig) with a real node: a second cluster starts beside the session's, serves
`kubectl exec` and `logs` from the host, loses its node abruptly and gets it back, and `delete` (by the
cluster's name alone, its state file gone) leaves no process, network namespace, link, cgroup or file behind."""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from pathlib import Path

from kuberig import Cluster, ClusterConfig, NodeConfig, create, delete
from kuberig.node import kubelet
from tests.node.conftest import wait_for_pod_phase
from tests.support.images import KUBEFLOW_MNIST, RUNTIME_PATH


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


def _node_ready(cluster: Cluster, name: str) -> str:
    conditions = cluster.kubectl_json("get", "node", name)["status"]["conditions"]
    return str(next(c["status"] for c in conditions if c["type"] == "Ready"))


def test_a_second_cluster_serves_exec_and_logs_loses_its_node_and_leaves_nothing_behind(
    cluster: Cluster, tmp_path: Path
) -> None:
    directory = tmp_path / "second"
    name = f"second-{secrets.token_hex(3)}"
    second = create(ClusterConfig(name, (NodeConfig("kubelet"),)), directory)
    node = second.kubelet_nodes()[0]
    try:
        assert node.slot != cluster.kubelet_nodes()[0].slot  # its own namespace, subnets and cgroup root
        second.push_image(KUBEFLOW_MNIST, {**RUNTIME_PATH})
        second.apply(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": "sleeper", "namespace": "default"},
                "spec": {
                    "containers": [
                        {"name": "c", "image": KUBEFLOW_MNIST, "command": ["sh", "-c", "echo up; sleep 600"]}
                    ]
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
        assert container and not any(_running(pid) for pid in container)
        assert Path(f"/run/netns/{node.slot.name}").exists()
        # ... and comes back: kubelet reports again, the node is Ready.
        kubelet.start(second.state, node)
        assert _link_up(node.slot.host_veth)
        deadline = time.monotonic() + 120
        while _node_ready(second, node.name) != "True":
            assert time.monotonic() < deadline, "the node never came back Ready"
            time.sleep(1)
    finally:
        (directory / "state.json").unlink(missing_ok=True)  # delete must find everything by the name alone
        delete(name, directory)
    assert not Path(f"/run/netns/{node.slot.name}").exists() and not node.slot.short_dir.exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert node.slot.host_veth not in links
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{node.slot.name}"))
    assert not _processes_mentioning(str(directory))
    assert not directory.exists()
    assert Path(f"/run/netns/{cluster.kubelet_nodes()[0].slot.name}").exists()  # the other cluster was left alone
