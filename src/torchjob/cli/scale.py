"""``torchjob scale NAME --workers N``: change the Worker count of a running elastic job within [min, max].

Locally the job's controller applies it on its next pass (it is woken at once); on a cluster the operator
does, from the job's new ``spec.pytorchReplicaSpecs.Worker.replicas``. The running group absorbs the
change: new Workers join it, the highest ones leave it, and neither counts as a failure.
"""

from __future__ import annotations

import argparse

from torchjob.cli.common import add_target_options, client


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("scale", help="change the Worker count of a running elastic job")
    p.add_argument("name")
    p.add_argument("--workers", type=int, required=True, metavar="N", help="the new Worker count")
    add_target_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    client(args).scale(args.name, args.workers)
    print(f'pytorchjob "{args.name}" scaled to {args.workers} Worker(s)')
    return 0
