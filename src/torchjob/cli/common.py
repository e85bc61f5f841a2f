"""Helpers the verbs share: the client, and how ages and states are printed."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from torchjob.sdk.local_client import LocalClient

if TYPE_CHECKING:
    from torchjob.sdk.client import JobClient
    from torchjob.sdk.cluster_client import ClusterClient

# `export TORCHJOB_TARGET=cluster` makes every verb talk to the cluster, as `--cluster` does.
TARGET_ENV = "TORCHJOB_TARGET"


def add_target_options(p: argparse.ArgumentParser, cluster_only: bool = False) -> None:
    """Where the jobs are: this machine (the default) or a Kubernetes cluster."""
    if not cluster_only:
        p.add_argument(
            "--cluster",
            action="store_true",
            help=f"jobs on the Kubernetes cluster of the current kubeconfig context (or set {TARGET_ENV}=cluster)",
        )
    p.add_argument("-n", "--namespace", help="cluster namespace (default: the context's, else default)")
    p.add_argument("--context", help="kubeconfig context to use")
    p.add_argument("--kubeconfig", help="kubeconfig file (default: $KUBECONFIG, then ~/.kube/config)")


def add_input_options(p: argparse.ArgumentParser) -> None:
    """The job file (``-`` reads standard input) and what fills or bounds it."""
    p.add_argument("file", help="the PyTorchJob or TrainJob YAML file, or - for standard input")
    p.add_argument("--values", metavar="FILE.json", help="values for the file's Jinja2 placeholders")
    add_runtime_option(p)
    p.add_argument(
        "--max-processes",
        type=positive_int,
        metavar="N",
        help="most local processes a job may start (replicas × nprocPerNode; default 64)",
    )


def add_runtime_option(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--runtime",
        action="append",
        default=[],
        metavar="FILE",
        help="a TrainJob's training runtime (ClusterTrainingRuntime or TrainingRuntime YAML); may repeat",
    )


def positive_int(text: str) -> int:
    return _int_from(text, 1, "a positive integer")


def non_negative_int(text: str) -> int:
    return _int_from(text, 0, "an integer from 0")


def _int_from(text: str, least: int, what: str) -> int:
    try:
        value = int(text)
    except ValueError:
        value = least - 1
    if value < least or value > 2**31 - 1:
        raise argparse.ArgumentTypeError(f"must be {what}, got {text!r}")
    return value


def max_processes(args: argparse.Namespace) -> int | None:
    return getattr(args, "max_processes", None)


def source_name(file: str) -> str:
    return "standard input" if file == "-" else file


def print_notes(notes: list[str]) -> None:
    for note in notes:
        print(f"torchjob: note: {note}", file=sys.stderr)


def on_cluster(args: argparse.Namespace) -> bool:
    return bool(getattr(args, "cluster", False)) or os.environ.get(TARGET_ENV, "").lower() == "cluster"


def cluster_client(args: argparse.Namespace) -> ClusterClient:
    from torchjob.sdk.cluster_client import ClusterClient  # the Kubernetes client: 0.2 s, only for --cluster

    return ClusterClient(args.namespace, args.context, args.kubeconfig)


def client(args: argparse.Namespace) -> JobClient:
    # Imported here so `torchjob --help` does not load the SDK.
    return cluster_client(args) if on_cluster(args) else local_client(args)


def local_client(args: argparse.Namespace) -> LocalClient:
    home = getattr(args, "home", None)
    return LocalClient(Path(home) if home else None)


def human_age(seconds: float) -> str:
    """Like kubectl: 45s, 12m, 3h, 5d."""
    seconds = max(0, int(seconds))
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds // size}{unit}"
    return f"{seconds}s"
