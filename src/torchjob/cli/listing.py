"""``torchjob list``: every job with its state, progress, age, restarts and in-place repairs, like
``kubectl get pytorchjobs``.

Progress is the job's ``status.trainerStatus.progressPercentage``: ``-`` for a script that reports none.
Spares are ``ready/asked`` for a job that keeps warm spares (``torchjob.io/spares``), else ``-``."""

from __future__ import annotations

import argparse

from torchjob.cli.common import add_target_options, client, human_age


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("list", help="list jobs")
    add_target_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    rows = [("NAME", "STATE", "PROGRESS", "AGE", "RESTARTS", "REPAIRS", "SPARES")]
    rows += [
        (
            s.name,
            s.state,
            "-" if s.progress is None else f"{s.progress}%",
            human_age(s.age_seconds),
            str(s.restarts),
            str(s.repairs),
            s.spares or "-",
        )
        for s in client(args).list()
    ]
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for row in rows:
        print("   ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip())
    return 0
