"""get nodes (name, kind, address, Ready) or the kubeconfig's path"""

from __future__ import annotations

import argparse

from kuberig.cli import options


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=("nodes", "kubeconfig"))
    options.add_cluster(parser)


def run(args: argparse.Namespace) -> int:
    cluster = options.cluster(args)
    if args.what == "kubeconfig":
        print(cluster.kubeconfig)
        return 0
    items = {n["metadata"]["name"]: n for n in cluster.kubectl_json("get", "nodes")["items"]}
    print(f"{'NAME':<20} {'KIND':<8} {'ADDRESS':<12} READY")
    for node in cluster.nodes:
        conditions = items.get(node.name, {}).get("status", {}).get("conditions", [])
        ready = next((c["status"] for c in conditions if c["type"] == "Ready"), "Unknown")
        print(f"{node.name:<20} {node.kind:<8} {node.ip:<12} {ready}")
    return 0
