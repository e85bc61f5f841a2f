"""kuberig: a Kubernetes cluster for tests, on one machine, with no Docker (kind's shape, processes instead
of containers): a real control plane, nodes simulated by kwok or real kubelets with containerd, an image
registry, and the verbs tests need (lose a node, load an image, export the logs).

    from kuberig import ClusterConfig, NodeConfig, create, delete
    cluster = create(ClusterConfig("demo", (NodeConfig("kubelet"),)))
    cluster.kubectl("get", "nodes")
    delete("demo", cluster.directory)
"""

from kuberig.cluster.create import create
from kuberig.cluster.delete import delete
from kuberig.cluster.handle import Cluster
from kuberig.config import ClusterConfig, NodeConfig
from kuberig.node.kubelet import KubeletNode
from kuberig.node.kwok import KwokNode, append_log_lines

__all__ = [
    "Cluster",
    "ClusterConfig",
    "KubeletNode",
    "KwokNode",
    "NodeConfig",
    "append_log_lines",
    "create",
    "delete",
]
