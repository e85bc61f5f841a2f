"""What a cluster is made of: its name, its nodes (simulated by kwok or real kubelets), and timing profiles.

A config is plain data, from code or from a YAML file (``kube-rig create --config FILE``)::

    name: demo
    nodes:
    - {kind: kubelet}
    - {kind: kwok, count: 2, gpus: 2}
    profile: fast-node-loss
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

NODE_KINDS = ("kwok", "kubelet")
# A lost node (kubelet stopped) is marked NotReady after 16 s and its Pods evicted 30 s later, instead of
# Kubernetes' 50 s and 5 minutes, so a test of node loss takes a minute. kubelet renews its lease every 2 s.
PROFILES: dict[str, dict[str, tuple[str, ...]]] = {
    "default": {},
    "fast-node-loss": {
        "kube-controller-manager": ("--node-monitor-grace-period=16s", "--node-monitor-period=2s"),
        "kube-apiserver": ("--default-not-ready-toleration-seconds=30", "--default-unreachable-toleration-seconds=30"),
    },
}


@dataclass(frozen=True)
class NodeConfig:
    kind: str = "kwok"
    count: int = 1
    gpus: int = 0  # nvidia.com/gpu each node advertises (node/resources.py): GPU jobs schedule on CPU nodes


@dataclass(frozen=True)
class ClusterConfig:
    name: str = "kuberig"
    nodes: tuple[NodeConfig, ...] = (NodeConfig("kwok", 2),)
    profile: str = ""  # "" picks fast-node-loss when a node is real (node loss is what such tests are for)
    extra_args: dict[str, tuple[str, ...]] = field(default_factory=dict)

    @property
    def kubelets(self) -> int:
        return sum(n.count for n in self.nodes if n.kind == "kubelet")

    @property
    def kwoks(self) -> int:
        return sum(n.count for n in self.nodes if n.kind == "kwok")

    def component_args(self) -> dict[str, tuple[str, ...]]:
        """Extra flags per control-plane component: the profile's, then the config's own."""
        profile = PROFILES[self.profile or ("fast-node-loss" if self.kubelets else "default")]
        names = set(profile) | set(self.extra_args)
        return {n: (*profile.get(n, ()), *self.extra_args.get(n, ())) for n in names}

    def validate(self) -> ClusterConfig:
        if not self.name or not self.name.replace("-", "").isalnum() or self.name != self.name.lower():
            raise ValueError(f"name: {self.name!r} must be lower-case letters, digits and dashes")
        for i, node in enumerate(self.nodes):
            if node.kind not in NODE_KINDS:
                raise ValueError(f"nodes[{i}].kind: {node.kind!r} must be one of {', '.join(NODE_KINDS)}")
            if node.count < 0:
                raise ValueError(f"nodes[{i}].count: must be 0 or more")
            if node.gpus < 0:
                raise ValueError(f"nodes[{i}].gpus: must be 0 or more")
        if self.profile and self.profile not in PROFILES:
            raise ValueError(f"profile: {self.profile!r} must be one of {', '.join(PROFILES)}")
        return self


def load(path: Path) -> ClusterConfig:
    """A config from a YAML file; a ValueError names the field that is wrong."""
    try:
        data: Any = yaml.safe_load(path.read_text()) or {}
    except OSError as err:
        raise ValueError(f"--config: {path}: {err.strerror}") from None
    except yaml.YAMLError as err:
        raise ValueError(f"--config: {path}: not YAML ({str(err).splitlines()[0]})") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping with name, nodes, profile")
    unknown = set(data) - {"name", "nodes", "profile"}
    if unknown:
        raise ValueError(f"{path}: unknown field {sorted(unknown)[0]!r} (expected name, nodes, profile)")
    nodes = tuple(
        NodeConfig(str(n.get("kind", "kwok")), int(n.get("count", 1)), int(n.get("gpus", 0)))
        for n in data.get("nodes", [])
    )
    return ClusterConfig(str(data.get("name", "kuberig")), nodes, str(data.get("profile", ""))).validate()
