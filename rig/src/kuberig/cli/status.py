"""status: is each of the cluster's processes alive, and where is its API server"""

from __future__ import annotations

import argparse

from kuberig import processes
from kuberig.cli import options


def add(parser: argparse.ArgumentParser) -> None:
    options.add_cluster(parser)


def run(args: argparse.Namespace) -> int:
    cluster = options.cluster(args)
    for p in cluster.state.processes:
        print(f"{p.name:<28} pid {p.pid:<8} {'running' if processes.alive(p) else 'NOT RUNNING'}")
    print(f"{'API server':<28} {cluster.server}")
    return 0
