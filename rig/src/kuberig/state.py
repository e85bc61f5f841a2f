"""A cluster's state, one JSON file in its directory: its processes, ports, nodes and registry.

The file is a convenience for ``kube-rig`` verbs run from another shell; ``delete`` does not depend on it
(it also finds what is left by the cluster's name: ``cluster/delete.py``).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from kuberig.processes import Process

STATE_FILE = "state.json"


@dataclass
class NodeState:
    """One node: ``kind`` is ``kwok`` (simulated) or ``kubelet`` (real); a kubelet node has a ``slot``."""

    name: str
    kind: str
    ip: str
    slot: int | None = None
    gpus: int = 0


@dataclass
class ClusterState:
    name: str
    directory: str
    etcd_data: str
    ports: dict[str, int]
    address: str = "127.0.0.1"
    processes: list[Process] = field(default_factory=list)
    nodes: list[NodeState] = field(default_factory=list)
    registry: str = ""
    host_ip: str = ""  # the host's address on the nodes' network (where Pods reach the host), if any

    @property
    def logs(self) -> Path:
        return Path(self.directory) / "logs"

    def save(self) -> None:
        (Path(self.directory) / STATE_FILE).write_text(json.dumps(asdict(self), indent=2))

    def add(self, process: Process) -> Process:
        self.processes.append(process)
        self.save()
        return process

    def process(self, name: str) -> Process:
        found = [p for p in self.processes if p.name == name]
        if not found:
            raise RuntimeError(f"the cluster has no process named {name}")
        return found[-1]


def load(directory: Path) -> ClusterState:
    """The state kept in ``directory``; FileNotFoundError if there is none."""
    data = json.loads((directory / STATE_FILE).read_text())
    data["processes"] = [Process(**p) for p in data["processes"]]
    data["nodes"] = [NodeState(**n) for n in data.get("nodes", [])]
    return ClusterState(**data)


def exists(directory: Path) -> bool:
    return (directory / STATE_FILE).exists()
