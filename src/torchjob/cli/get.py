"""``torchjob get NAME [-o json|yaml]``: one job, as a summary or as the PyTorchJob object with its status."""

from __future__ import annotations

import argparse
import json

from torchjob.cli.common import client, human_age


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("get", help="show one job")
    p.add_argument("name")
    p.add_argument("-o", "--output", choices=("summary", "json", "yaml"), default="summary")
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    job = client(args).get(args.name)
    if args.output == "json":
        print(json.dumps(job.to_wire(), indent=2))
        return 0
    if args.output == "yaml":
        import yaml

        print(yaml.safe_dump(job.to_wire(), sort_keys=False), end="")
        return 0
    from datetime import datetime, timezone

    from torchjob.core.conditions import state
    from torchjob.core.times import parse_timestamp

    status = job.status
    created = job.metadata.creation_timestamp
    age = (datetime.now(timezone.utc) - parse_timestamp(created)).total_seconds() if created else 0
    print(f"Name:      {job.name}")
    print(f"State:     {state(status) or 'Pending'}")
    print(f"Age:       {human_age(age)}")
    print(f"Attempt:   {status.attempt + 1} ({status.restart_count} restarts)")
    for rtype, rs in status.replica_statuses.items():
        print(
            f"{rtype.value + ':':<10} {rs.active or 0} active, {rs.succeeded or 0} succeeded, {rs.failed or 0} failed"
        )
    print("Conditions:")
    for cond in status.conditions:
        print(f"  {cond.type.value:<11} {cond.status:<6} {cond.reason:<22} {cond.message}")
    if len(status.attempts) > 1 or any(a.outcome and a.outcome != "succeeded" for a in status.attempts):
        print("Attempts:")
        for record in status.attempts:
            print(f"  {record.attempt + 1}: {record.start_time} → {record.end_time or 'now'}  {record.outcome or ''}")
    return 0
