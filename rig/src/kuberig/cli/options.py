"""Options every verb shares: which cluster (``--name``, ``--dir``)."""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

from kuberig.cluster.handle import Cluster
from kuberig.state import exists

DEFAULT_NAME = "kuberig"


def add_cluster(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--name", default=DEFAULT_NAME, help=f"the cluster's name (default {DEFAULT_NAME})")
    parser.add_argument("--dir", type=Path, help="where the cluster keeps its files (default /tmp/kuberig-NAME)")


def directory(args: argparse.Namespace) -> Path:
    return Path(args.dir or Path(tempfile.gettempdir()) / f"kuberig-{args.name}")


def cluster(args: argparse.Namespace) -> Cluster:
    found = directory(args)
    if not exists(found):
        raise RuntimeError(f"no cluster in {found}: `kube-rig create` first, or name it with --name/--dir")
    return Cluster(found)
