"""``torchjob`` entry point: parses the verb and maps errors to one line and an exit code.

Exit codes: 0 success (a run that Succeeded), 1 a job that Failed or a request that could not be done,
2 invalid input (bad job file, bad arguments), 130 interrupted by Ctrl-C (143 by SIGTERM).
"""

from __future__ import annotations

import argparse
import sys

from torchjob import __version__
from torchjob.cli import delete, get, listing, logs, metrics, operator, render, run, scale, submit, validate

EXIT_OK, EXIT_FAILED, EXIT_INVALID = 0, 1, 2
VERBS = (run, validate, render, submit, listing, get, logs, metrics, scale, delete, operator)


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
    # Imported late: `torchjob --help` and `torchjob list` must not pay for what only some verbs need.
    from torchjob.api.errors import JobFileError, ValidationError
    from torchjob.sdk.errors import SdkError

    try:
        code: int = args.handler(args)
        return code
    except (JobFileError, ValidationError) as err:
        for line in str(err).splitlines():
            print(f"torchjob: {_with_source(args, line)}", file=sys.stderr)
        return EXIT_INVALID
    except SdkError as err:
        print(f"torchjob: {err}", file=sys.stderr)
        return EXIT_FAILED
    except BrokenPipeError:
        return EXIT_OK  # `torchjob logs x | head`


def _with_source(args: argparse.Namespace, line: str) -> str:
    source = getattr(args, "file", None)
    if source and not line.startswith(str(source)):
        return f"{source}: {line}"
    return line


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
