"""kuberig's CLI on the session's cluster, as a developer types it: get, status, export logs, and the one-line
refusals (a simulated node cannot stop; no cluster where none is)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kuberig import Cluster


def kube_rig(*args: str) -> subprocess.CompletedProcess[str]:
    # The console script beside this interpreter, as tools/bootstrap installs it.
    command = str(Path(sys.executable).parent / "kube-rig")
    return subprocess.run([command, *args], capture_output=True, text=True, timeout=120)


def test_get_status_and_export_logs_of_a_cluster(cluster: Cluster, tmp_path: Path) -> None:
    where = ("--dir", str(cluster.directory))
    nodes = kube_rig("get", "nodes", *where)
    assert nodes.returncode == 0, nodes.stderr
    rows = [line.split() for line in nodes.stdout.splitlines()[1:]]
    assert [(r[0], r[1], r[3]) for r in rows] == [("kwok-node-0", "kwok", "True"), ("kwok-node-1", "kwok", "True")]
    assert kube_rig("get", "kubeconfig", *where).stdout.strip() == str(cluster.kubeconfig)
    status = kube_rig("status", *where)
    assert status.returncode == 0 and "kube-apiserver" in status.stdout and "NOT RUNNING" not in status.stdout
    exported = kube_rig("export", "logs", str(tmp_path / "logs"), *where)
    assert exported.returncode == 0, exported.stderr
    assert (tmp_path / "logs" / "processes" / "kube-apiserver.log").stat().st_size > 0


def test_the_cli_refuses_in_one_line(cluster: Cluster, tmp_path: Path) -> None:
    for action in ("stop", "revive"):
        refused = kube_rig("node", action, "kwok-node-0", "--dir", str(cluster.directory))
        assert refused.returncode == 1
        assert refused.stderr.strip() == (
            "kube-rig: kwok-node-0 is a kwok node: only a real (kubelet) node can stop, start and revive"
        )
    missing = kube_rig("get", "nodes", "--dir", str(tmp_path / "none"))
    assert missing.returncode == 1 and len(missing.stderr.strip().splitlines()) == 1
    assert "no cluster in" in missing.stderr
