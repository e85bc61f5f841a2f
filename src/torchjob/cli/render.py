"""``torchjob render FILE --to pytorchjob|indexed-job [--values FILE.json]``: print manifests, run nothing.

``--values`` fills Jinja2 placeholders in the job file first (the ``prepare.sh`` + ``variables.json``
workflow); a placeholder without a value is an error naming it.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("render", help="print the job as a normalized PyTorchJob or as an Indexed Job")
    p.add_argument("file", help="the PyTorchJob YAML file (may hold Jinja2 placeholders)")
    p.add_argument("--to", choices=("pytorchjob", "indexed-job"), default="pytorchjob")
    p.add_argument("--values", metavar="FILE.json", help="values for the file's Jinja2 placeholders")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    import yaml

    from torchjob.api.loading import parse_job_text

    text = read_job_text(args.file, args.values)
    job = parse_job_text(text, source=args.file)
    if args.to == "pytorchjob":
        wire = job.to_wire()
        wire.pop("status", None)
        print(yaml.safe_dump(wire, sort_keys=False), end="")
        return 0
    from torchjob.backends.kubernetes.indexed_job import render

    manifests, notes = render(job)
    for note in notes:
        print(f"torchjob: note: {note}", file=sys.stderr)
    print(yaml.safe_dump_all(manifests, sort_keys=False), end="")
    return 0


def read_job_text(path: str, values_path: str | None) -> str:
    """The job file's text, its Jinja2 placeholders filled from ``values_path`` when given."""
    text = _read(path)
    return _fill(text, path, values_path) if values_path else text


def _read(path: str) -> str:
    from torchjob.api.errors import JobFileError

    try:
        return Path(path).read_text(encoding="utf-8")
    except OSError as err:
        raise JobFileError(f"{path}: cannot be read ({err.strerror})") from None


def _fill(text: str, source: str, values_path: str) -> str:
    import jinja2

    from torchjob.api.errors import JobFileError

    try:
        values = json.loads(Path(values_path).read_text(encoding="utf-8"))
    except OSError as err:
        raise JobFileError(f"{values_path}: cannot be read ({err.strerror})") from None
    except ValueError as err:
        raise JobFileError(f"{values_path}: not valid JSON ({err})") from None
    if not isinstance(values, dict):
        raise JobFileError(f"{values_path}: expected a JSON object of placeholder values")
    try:
        return jinja2.Environment(undefined=jinja2.StrictUndefined).from_string(text).render(values)
    except jinja2.UndefinedError as err:
        raise JobFileError(f"{source}: {err.message}; give it in {values_path}") from None
    except jinja2.TemplateSyntaxError as err:
        raise JobFileError(f"{source}: template error at line {err.lineno}: {err.message}") from None
