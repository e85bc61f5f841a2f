"""``torchjob delete NAME``: stop a job if it runs, then remove its records and logs."""

from __future__ import annotations

import argparse

from torchjob.cli.common import add_target_options, client


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("delete", help="stop and remove a job")
    p.add_argument("names", nargs="+", metavar="NAME")
    add_target_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    c = client(args)
    for name in args.names:
        c.delete(name)
        print(f'pytorchjob "{name}" deleted')
    return 0
