"""export logs DEST: copy the cluster's process logs and its Pods' logs into a folder (for CI artifacts)"""

from __future__ import annotations

import argparse
from pathlib import Path

from kuberig.cli import options


def add(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("what", choices=("logs",))
    parser.add_argument("destination", type=Path)
    options.add_cluster(parser)


def run(args: argparse.Namespace) -> int:
    print(f"kube-rig: logs in {options.cluster(args).export_logs(args.destination)}")
    return 0
