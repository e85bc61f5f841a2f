"""``torchjob validate FILE [--local]``: check a job file without running it.

A PyTorchJob valid for a cluster is valid here (exit 0), even when it could not run locally as it is
(no ``command``: the seeds' own YAML and Kubeflow's examples); what a local run would need is then a note.
``--local`` makes those problems errors, as ``torchjob run`` does.
"""

from __future__ import annotations

import argparse
import sys

from torchjob.api.errors import ValidationError
from torchjob.api.types import KIND
from torchjob.cli.common import add_input_options, max_processes, print_notes, source_name


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("validate", help="check a PyTorchJob file and report every problem")
    add_input_options(p)
    p.add_argument("--local", action="store_true", help="also require what a local run needs (as `run` does)")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from torchjob.api.loading import load_job  # a job file's models: 30 ms (cli/__init__.py)
    from torchjob.backends.local.mapping import DEFAULT_MAX_PROCESSES, local_problems

    loaded = load_job(args.file, args.values, args.runtime)
    local = local_problems(loaded.job, max_processes(args) or DEFAULT_MAX_PROCESSES)
    if local and args.local:
        raise ValidationError(local)
    print_notes(loaded.notes)
    for problem in local:
        print(f"torchjob: note: a local run needs: {problem}", file=sys.stderr)
    job = loaded.job
    replicas = ", ".join(f"{spec.replicas} {rtype.value}" for rtype, spec in job.spec.pytorch_replica_specs.items())
    shape = replicas if loaded.kind == KIND else f"runs as {replicas}"
    print(f"{source_name(args.file)}: valid {loaded.kind} {job.name!r} ({shape})")
    return 0
