"""``torchjob logs NAME [--replica worker-1] [--attempt N] [-f]``: replica output, prefixed by replica."""

from __future__ import annotations

import argparse

from torchjob.cli.common import add_target_options, client


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("logs", help="print the output of a job's replicas")
    p.add_argument("name")
    p.add_argument("--replica", help="only this replica, e.g. master-0 or worker-1")
    p.add_argument("--attempt", type=int, help="attempt number (1 = first); default: the current one")
    p.add_argument("-f", "--follow", action="store_true", help="keep printing until the job ends")
    add_target_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    c = client(args)
    attempt = None if args.attempt is None else args.attempt - 1
    if args.follow:
        for replica, line in c.follow(args.name, args.replica):
            print(line if args.replica else f"[{replica}] {line}", flush=True)
        return 0
    text = c.logs(args.name, args.replica, attempt)
    if text:
        print(text)
    return 0
