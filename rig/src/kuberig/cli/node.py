"""node stop|start|revive NODE: a real node vanishes abruptly (link cut, everything killed), comes back, or has its
daemons that exited started again (as a node's init system restarts a failed unit)."""

from __future__ import annotations

import argparse

from kuberig.cli import options
from kuberig.node import kubelet


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=("stop", "start", "revive"))
    parser.add_argument("node", help="the node's name (kube-rig get nodes)")
    options.add_cluster(parser)


def run(args: argparse.Namespace) -> int:
    cluster = options.cluster(args)
    node = cluster.node(args.node)
    if not isinstance(node, kubelet.KubeletNode):
        raise RuntimeError(f"{node.name} is a {node.kind} node: only a real (kubelet) node can stop, start and revive")
    if args.action == "revive":
        started = kubelet.revive(cluster.state, node)
        print(
            f"kube-rig: node {node.name}: "
            + (f"{', '.join(started)} started again" if started else "nothing had exited")
        )
        return 0
    (kubelet.stop if args.action == "stop" else kubelet.start)(cluster.state, node)
    print(f"kube-rig: node {node.name} {'stopped' if args.action == 'stop' else 'started'}")
    return 0
