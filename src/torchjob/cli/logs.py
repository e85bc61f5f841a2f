"""``torchjob logs NAME [--replica worker-1] [--attempt N] [-f]``: replica output, prefixed by replica.

Attempts are numbered as everywhere else (``status.attempt``, ``TORCHJOB_ATTEMPT``, ``logs/<attempt>/``):
0 is the first. A job, replica or attempt that does not exist is an error (exit 3), never an empty answer.
"""

from __future__ import annotations

import argparse

from torchjob.cli.common import add_target_options, client, non_negative_int


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("logs", help="print the output of a job's replicas")
    p.add_argument("name")
    p.add_argument("--replica", help="only this replica, e.g. master-0 or worker-1")
    p.add_argument(
        "--attempt", type=non_negative_int, help="attempt number as in the status (0 = first); default: the current one"
    )
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    add_target_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    c = client(args)
    attempt = args.attempt
    if args.follow:
        for replica, line in c.follow(args.name, args.replica):
            print(line if args.replica else f"[{replica}] {line}", flush=True)
        return 0
    text = c.logs(args.name, args.replica, attempt)
    if text:
        print(text)
    return 0
