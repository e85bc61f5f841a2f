"""create a cluster: a control plane, kwok nodes and/or real kubelet nodes; prints `export KUBECONFIG=...`"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from kuberig import config
from kuberig.cli import options
from kuberig.cluster.create import create
from kuberig.state import exists


def add(parser: argparse.ArgumentParser) -> None:
    options.add_cluster(parser)
    parser.add_argument("--config", type=Path, help="a cluster config file (YAML: name, nodes, profile)")
    parser.add_argument("--kwok-nodes", type=int, help="simulated nodes (default 2 when no real node is asked for)")
    parser.add_argument("--real-nodes", type=int, default=0, help="real kubelet nodes (Pods run their containers)")
    parser.add_argument("--real-node", action="store_true", help="one real node (as --real-nodes 1)")
    parser.add_argument("--fake-gpus", type=int, default=0, help="nvidia.com/gpu each node advertises")
    parser.add_argument("--profile", choices=tuple(config.PROFILES), default="", help="control-plane timing")


def _config(args: argparse.Namespace) -> config.ClusterConfig:
    if args.config:
        return config.load(args.config)
    real = max(args.real_nodes, 1 if args.real_node else 0)
    kwok = args.kwok_nodes if args.kwok_nodes is not None else (0 if real else 2)
    gpus = args.fake_gpus
    nodes = tuple(
        n for n in (config.NodeConfig("kubelet", real, gpus), config.NodeConfig("kwok", kwok, gpus)) if n.count
    )
    return config.ClusterConfig(args.name, nodes, args.profile).validate()


def run(args: argparse.Namespace) -> int:
    wanted = _config(args)
    directory = options.directory(argparse.Namespace(dir=args.dir, name=wanted.name))
    if exists(directory):
        print(
            f"kube-rig: a cluster already uses {directory}; `kube-rig delete --dir {directory}` first",
            file=sys.stderr,
        )
        return 1
    cluster = create(wanted, directory)
    kinds = ", ".join(f"{n.name} ({n.kind})" for n in cluster.nodes)
    print(f"kube-rig: cluster {wanted.name}, API server {cluster.server}, nodes {kinds}; kubectl and clients:")
    print(f"export KUBECONFIG={cluster.kubeconfig}")
    return 0
