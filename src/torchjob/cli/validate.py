"""``torchjob validate FILE``: check a job file without running it."""

from __future__ import annotations

import argparse

from torchjob.cli.common import local_client


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("validate", help="check a PyTorchJob file and report every problem")
    p.add_argument("file", help="the PyTorchJob YAML file")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    job = local_client(args).load(args.file)
    replicas = ", ".join(f"{spec.replicas} {rtype.value}" for rtype, spec in job.spec.pytorch_replica_specs.items())
    print(f"{args.file}: valid PyTorchJob {job.name!r} ({replicas})")
    return 0
