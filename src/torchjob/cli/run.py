"""``torchjob run FILE``: run a PyTorchJob on this machine, in the foreground or detached."""

from __future__ import annotations

import argparse
import shlex
import sys
from datetime import datetime, timezone
from pathlib import Path

from torchjob.api.types import DEFAULT_PORT, ConditionType, PyTorchJob
from torchjob.backends.local.ports import LOCALHOST
from torchjob.cli.common import add_input_options, local_client, max_processes, print_notes
from torchjob.core import conditions
from torchjob.core.envs import DEFAULT_RDZV_PORT
from torchjob.sdk.local_client import LocalClient


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("run", help="run a PyTorchJob locally: each replica is a process on this machine")
    add_input_options(p)
    p.add_argument("--detach", "-d", action="store_true", help="start in the background and return at once")
    p.add_argument("--dry-run", action="store_true", help="print each replica's command and env, run nothing")
    p.add_argument("--replace", action="store_true", help="delete a finished job of the same name first")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    # Late, here and below: the local backend, the planner and the controller are `run`'s alone (cli/__init__.py).
    from torchjob.backends.local.mapping import elastic_launch_problem, ignored_fields
    from torchjob.core.policies.elastic import etcd_stand_in

    c = local_client(args)
    loaded = c.load(args.file, args.values, max_processes(args), args.runtime)
    job = loaded.job
    ignored = ignored_fields(job)
    local = [f"ignored when running locally: {', '.join(ignored)}"] if ignored else []
    print_notes([*loaded.notes, *local, *filter(None, [etcd_stand_in(job)])])
    launch_problem = elastic_launch_problem(job)
    if launch_problem:
        print(f"torchjob: warning: {launch_problem}", file=sys.stderr)
    # A job read from standard input runs in the current directory, as its relative paths mean there.
    job_file_dir = Path.cwd() if args.file == "-" else Path(args.file).parent
    if args.dry_run:
        return _dry_run(c, job, job_file_dir)
    job = c.create(job, job_file_dir, replace=args.replace)
    if args.detach:
        pid = c.start_detached(job.name)
        print(f'pytorchjob "{job.name}" started (controller pid {pid}); follow it: torchjob logs {job.name} -f')
        return 0
    return _foreground(c, job)


def _foreground(c: LocalClient, job: PyTorchJob) -> int:
    from torchjob.cli.display import RunDisplay
    from torchjob.controller.local_driver import Interrupted

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


def _dry_run(c: LocalClient, job: PyTorchJob, job_file_dir: Path) -> int:
    from torchjob.backends.local.backend import PLATFORM
    from torchjob.backends.local.mapping import local_addressing, process_spec
    from torchjob.core.actions import CreateReplica
    from torchjob.core.observed import Observed
    from torchjob.core.planning import plan

    # The planner's first pass, as the local backend would be told it; ports are chosen when the job starts,
    # so the dry run shows the defaults in their place.
    first = plan(job, Observed([]), PLATFORM, datetime.now(timezone.utc))
    for action in (a for a in first.actions if isinstance(a, CreateReplica)):
        replica = action.replica
        addressing = local_addressing(
            job, LOCALHOST, DEFAULT_PORT, DEFAULT_RDZV_PORT, f"{job.name}-0", action.rendezvous_at_store
        )
        spec = process_spec(
            job,
            replica,
            0,
            addressing,
            job_file_dir=str(job_file_dir.resolve()),
            output_dir=str(c.store.output_dir(job.name)),
            python_dir=str(Path(sys.executable).parent),
            inherited_path="$PATH",
        )
        print(f"# {replica}  (cwd {spec.cwd})")
        print(shlex.join(spec.argv))
        for key, value in spec.env.items():
            print(f"  {key}={value}")
    print(
        f"# ports are picked fresh when the job starts; {DEFAULT_PORT} and {DEFAULT_RDZV_PORT} stand in for them here"
    )
    return 0
