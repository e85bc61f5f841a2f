"""delete a cluster: stop everything it started and remove what it made, even without its state file"""

from __future__ import annotations

import argparse

from kuberig.cli import options
from kuberig.cluster.delete import delete
from kuberig.state import exists, load


def add(parser: argparse.ArgumentParser) -> None:
    options.add_cluster(parser)


def run(args: argparse.Namespace) -> int:
    directory = options.directory(args)
    name = load(directory).name if exists(directory) else args.name
    delete(name, directory)
    print(f"kube-rig: deleted cluster {name}")
    return 0
