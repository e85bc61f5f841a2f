"""An attempt's output is kept before its Pods go, but never asked of a node that stopped reporting: the API server
would try that node's kubelet until its own timeout, and the restart waits meanwhile (seen: 10 s after a lost node)."""

from __future__ import annotations

from typing import Any

from torchjob.backends.kubernetes import log_archive
from torchjob.backends.kubernetes.log_keeper import LogKeeper
from torchjob.testing import make_job

JOB = make_job("j").master().workers(1).build()


class Client:
    """The API server's answers: every Pod's log is one line; what was asked and filed is recorded."""

    def __init__(self) -> None:
        self.logs_read: list[str] = []
        self.filed: list[dict[str, Any]] = []

    def log(self, name: str, **_: Any) -> list[str]:
        self.logs_read.append(name)
        return [f"{name} trained\n"]

    def create(self, obj: Any, namespace: str | None = None) -> None:
        self.filed.append(obj.to_dict())


def pod(name: str, node: str) -> dict[str, Any]:
    running = {"containerStatuses": [{"state": {"running": {}}}]}
    return {"metadata": {"name": name}, "spec": {"nodeName": node}, "status": running}


def test_the_output_of_a_pod_on_a_silent_node_is_not_asked_for() -> None:
    client = Client()
    keeper = LogKeeper(client, lambda _verb: None, lambda: {"node-b"})  # type: ignore[arg-type]
    keeper.keep(JOB, [(0, "master-0", pod("j-master-0", "node-a")), (0, "worker-0", pod("j-worker-0", "node-b"))])
    assert client.logs_read == ["j-master-0"]
    [filed] = client.filed
    assert log_archive.read(filed) == {"master-0": "j-master-0 trained\n"}
