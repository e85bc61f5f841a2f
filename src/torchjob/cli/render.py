"""``torchjob render FILE --to pytorchjob|indexed-job [--values FILE.json]``: print manifests, run nothing.

``--values`` fills Jinja2 placeholders in the job file first (the ``prepare.sh`` + ``variables.json``
workflow), in a sandbox (see torchjob.api.templating); a placeholder without a value is an error naming it.
"""

from __future__ import annotations

import argparse

from torchjob.backends.kubernetes.indexed_job import render
from torchjob.cli.common import add_runtime_option, print_notes


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("render", help="print the job as a normalized PyTorchJob or as an Indexed Job")
    p.add_argument("file", help="the PyTorchJob or TrainJob YAML file (may hold Jinja2 placeholders), or -")
    p.add_argument("--to", choices=("pytorchjob", "indexed-job"), default="pytorchjob")
    p.add_argument("--values", metavar="FILE.json", help="values for the file's Jinja2 placeholders")
    add_runtime_option(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import yaml

    from torchjob.api.loading import load_job  # a job file's models: 30 ms (cli/__init__.py)

    loaded = load_job(args.file, args.values, args.runtime)
    print_notes(loaded.notes)
    job = loaded.job
    if args.to == "pytorchjob":
        wire = job.to_wire()
        wire.pop("status", None)
        print(yaml.safe_dump(wire, sort_keys=False), end="")
        return 0

    manifests, notes = render(job)
    print_notes(notes)
    print(yaml.safe_dump_all(manifests, sort_keys=False), end="")
    return 0
