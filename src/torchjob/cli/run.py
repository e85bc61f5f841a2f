"""``torchjob run FILE``: run a PyTorchJob on this machine, in the foreground or detached."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from torchjob.cli.common import local_client

if TYPE_CHECKING:
    from torchjob.api.types import PyTorchJob
    from torchjob.sdk.local import LocalClient


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("run", help="run a PyTorchJob locally: each replica is a process on this machine")
    p.add_argument("file", help="the PyTorchJob YAML file")
    p.add_argument("--detach", "-d", action="store_true", help="start in the background and return at once")
    p.add_argument("--dry-run", action="store_true", help="print each replica's command and env, run nothing")
    p.add_argument("--replace", action="store_true", help="delete a finished job of the same name first")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from torchjob.backends.local.mapping import elastic_launch_problem, ignored_fields

    c = local_client(args)
    job = c.load(args.file)
    ignored = ignored_fields(job)
    if ignored:
        print(f"torchjob: note: ignored when running locally: {', '.join(ignored)}", file=sys.stderr)
    launch_problem = elastic_launch_problem(job)
    if launch_problem:
        print(f"torchjob: warning: {launch_problem}", file=sys.stderr)
    if args.dry_run:
        return _dry_run(c, args.file)
    job = c.create(job, Path(args.file).parent, replace=args.replace)
    if args.detach:
        pid = c.start_detached(job.name)
        print(f'pytorchjob "{job.name}" started (controller pid {pid}); follow it: torchjob logs {job.name} -f')
        return 0
    return _foreground(c, job)


def _foreground(c: LocalClient, job: PyTorchJob) -> int:
    from torchjob.api.types import ConditionType
    from torchjob.cli.display import RunDisplay
    from torchjob.controller.local import Interrupted
    from torchjob.core import conditions

    display = RunDisplay(c, job)
    try:
        with display:
            final = c.run(job.name, on_event=display.event, on_pass=display.update)
    except Interrupted as interrupted:
        display.err.print(display.summary(None, interrupted=str(interrupted)))
        return 128 + interrupted.signum
    display.err.print(display.summary(final))
    if final is None:
        return 0
    return 0 if conditions.is_true(final.status, ConditionType.SUCCEEDED) else 1


def _dry_run(c: LocalClient, file: str) -> int:
    import shlex

    from torchjob.backends.local.backend import LOCALHOST
    from torchjob.backends.local.mapping import process_spec
    from torchjob.core.envs import Addressing
    from torchjob.core.replicas import expected_replicas

    job = c.load(file)
    # Ports are chosen when the job starts; the dry run shows placeholders-as-numbers of the defaults.
    addressing = Addressing(LOCALHOST, 23456, LOCALHOST, 29400, rdzv_id=f"{job.name}-0")
    for replica in expected_replicas(job):
        spec = process_spec(
            job,
            replica,
            0,
            addressing,
            job_file_dir=str(Path(file).parent.resolve()),
            output_dir=str(c.store.output_dir(job.name)),
            python_dir=str(Path(sys.executable).parent),
            inherited_path="$PATH",
        )
        print(f"# {replica}  (cwd {spec.cwd})")
        print(shlex.join(spec.argv))
        for key, value in spec.env.items():
            print(f"  {key}={value}")
    print("# ports are picked fresh when the job starts; 23456 and 29400 stand in for them here")
    return 0
