"""The real-node rig itself: a second one starts beside the session's, serves `kubectl exec` and `logs` from
the host, and `down` leaves no process, network namespace, link, cgroup or file behind."""

from __future__ import annotations

import subprocess
from pathlib import Path

from tools import real_node

from tests.node.conftest import wait_for_pod_phase
from tests.node.images import KUBEFLOW_MNIST, RUNTIME_PATH


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


def test_a_second_node_serves_exec_and_logs_and_leaves_nothing_behind(node: real_node.RealNode, tmp_path: Path) -> None:
    directory = tmp_path / "second"
    second = real_node.up(directory)

    try:
        assert second.index != node.index  # its own namespace, subnet and cgroup root
        second.push_image(KUBEFLOW_MNIST, {**RUNTIME_PATH})
        second.rig.apply(
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
        exec_ = second.rig.kubectl("exec", "sleeper", "--", "python3", "-c", "import torch; print(6 * 7)")
        assert exec_.stdout.strip() == "42"
        assert second.rig.kubectl("logs", "sleeper").stdout.strip() == "up"
    finally:
        real_node.down(directory)
    assert not Path(f"/run/netns/{second.name}").exists() and not second.short_dir.exists()
    links = subprocess.run(["ip", "-o", "link"], capture_output=True, text=True, check=True).stdout
    assert second.host_veth not in links
    assert not list(Path("/sys/fs/cgroup").glob(f"*/{second.name}"))
    assert not _processes_mentioning(str(directory))
    assert not directory.exists()
    assert Path(f"/run/netns/{node.name}").exists()  # the other node was left alone
