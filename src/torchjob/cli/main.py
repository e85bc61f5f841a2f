"""``torchjob`` entry point: parses the verb and maps errors to one line and an exit code.

Exit codes: 0 success (a run that Succeeded), 1 a job that Failed, 2 invalid input (bad job file, bad
arguments, a name that cannot be a job's), 3 a request that was refused or could not be done (no such job,
replica or attempt; a job of that name exists or still runs; damaged records), 130 interrupted by Ctrl-C
(143 by SIGTERM).
"""

from __future__ import annotations

import argparse
import sys

from torchjob import __version__
from torchjob.api.errors import JobFileError, ValidationError
from torchjob.api.names import job_name_problem
from torchjob.cli import delete, get, listing, logs, metrics, operator, render, run, scale, submit, ui, validate
from torchjob.sdk.errors import SdkError

EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_REFUSED = 0, 1, 2, 3
VERBS = (run, validate, render, submit, listing, get, logs, metrics, scale, delete, ui, operator)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="torchjob",
        description="Run Kubeflow PyTorchJob files locally (processes on this machine) or on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"torchjob {__version__}")
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    for verb in VERBS:
        verb.add_parser(verbs)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    # A name on the command line is checked before it can touch the file system or the API.
    bad_names = [problem for name in _names(args) if (problem := job_name_problem(name))]
    if bad_names:
        for problem in bad_names:
            print(f"torchjob: {problem}", file=sys.stderr)
        return EXIT_INVALID
    try:
        code: int = args.handler(args)
        return code
    except (JobFileError, ValidationError) as err:
        for line in str(err).splitlines():
            print(f"torchjob: {_with_source(args, line)}", file=sys.stderr)
        return EXIT_INVALID
    except SdkError as err:
        print(f"torchjob: {err}", file=sys.stderr)
        return EXIT_REFUSED
    except BrokenPipeError:
        return EXIT_OK  # `torchjob logs x | head`


def _names(args: argparse.Namespace) -> list[str]:
    names: list[str] = list(getattr(args, "names", None) or [])
    if getattr(args, "name", None) is not None:
        names.append(args.name)
    return names


def _with_source(args: argparse.Namespace, line: str) -> str:
    source = getattr(args, "file", None)
    source = "standard input" if source == "-" else source
    if source and not line.startswith(str(source)):
        return f"{source}: {line}"
    return line


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
