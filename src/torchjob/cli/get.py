"""``torchjob get NAME [-o json|yaml]``: one job, as a summary or as the PyTorchJob object with its status.

Works from the stored wire-format object, without building models, so it answers at once.
"""

from __future__ import annotations

import argparse
import json
from datetime import datetime, timezone
from typing import Any

from torchjob.api.extensions import SPARES
from torchjob.api.types import LearnedDeadlines
from torchjob.cli.common import add_target_options, client, human_age
from torchjob.core.times import age_seconds
from torchjob.sdk.summary import last_condition


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("get", help="show one job")
    p.add_argument("name")
    p.add_argument("-o", "--output", choices=("summary", "json", "yaml"), default="summary")
    add_target_options(p)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    wire = client(args).get_wire(args.name)
    if args.output == "json":
        print(json.dumps(wire, indent=2))
    elif args.output == "yaml":
        import yaml

        print(yaml.safe_dump(wire, sort_keys=False), end="")
    else:
        print(summary(wire))
    return 0


def summary(wire: dict[str, Any]) -> str:
    status = wire.get("status", {})
    conditions = status.get("conditions", [])
    age = age_seconds(wire.get("metadata", {}).get("creationTimestamp"), datetime.now(timezone.utc))
    lines = [
        f"Name:      {wire['metadata']['name']}",
        f"State:     {last_condition(wire).get('type', 'Pending')}",
        f"Age:       {human_age(age)}",
        f"Attempt:   {status.get('attempt', 0)} ({status.get('restartCount', 0)} restarts; 0 is the first)",
    ]
    waiting = status.get("nextAttemptTime")
    if waiting and age_seconds(waiting, datetime.now(timezone.utc)) < 0:
        lines.append(
            f"Back-off:  the next attempt starts at {waiting} ({status.get('crashLoopRestarts', 0)} restarts in a row "
            "of attempts that failed early)"
        )
    trainer = status.get("trainerStatus")
    if trainer:
        lines.append(f"Progress:  {_progress(trainer)}")
    annotations = wire.get("metadata", {}).get("annotations") or {}
    lines.append(f"Deadlines: {_deadlines(annotations, status.get('learnedDeadlines'))}")
    spares = (wire.get("metadata", {}).get("annotations") or {}).get(SPARES)
    if status.get("repairs") or spares:
        lines.append(
            f"Repairs:   {status.get('repairs', 0)} in place (a warm spare took a lost member's place, no restart); "
            f"{status.get('sparesReady', 0)} of {spares or 0} spare(s) ready"
        )
    group = status.get("membership")
    if group and group.get("attempt") == status.get("attempt", 0):
        members = ", ".join(group.get("members") or [])
        lines.append(f"Group:     {members} (generation {group.get('generation')}, re-formed in place)")
    elastic = wire.get("spec", {}).get("elasticPolicy")
    if elastic is not None:
        workers = wire["spec"]["pytorchReplicaSpecs"].get("Worker", {}).get("replicas", 1)
        lines.append(
            f"Elastic:   {workers} Worker(s) wanted, {elastic.get('minReplicas', workers)}–"
            f"{elastic.get('maxReplicas', workers)} allowed; {status.get('membershipChanges', 0)} membership "
            "changes (not failures)"
        )
    for rtype, counts in status.get("replicaStatuses", {}).items():
        lines.append(
            f"{rtype + ':':<10} {counts.get('active', 0)} active, {counts.get('succeeded', 0)} succeeded, "
            f"{counts.get('failed', 0)} failed"
        )
    lines.append("Conditions:")
    lines += [
        f"  {c['type']:<11} {c['status']:<6} {c.get('reason', ''):<22} {c.get('message', '')}" for c in conditions
    ]
    attempts = status.get("attempts", [])
    if len(attempts) > 1 or any(a.get("outcome") not in (None, "succeeded") for a in attempts):
        lines.append("Attempts:")
        lines += [
            f"  {a['attempt']}: {a['startTime']} → {a.get('endTime') or 'now'}  {a.get('outcome') or ''}"
            for a in attempts
        ]
    return "\n".join(lines)


def _deadlines(annotations: dict[str, str], learned: dict[str, Any] | None) -> str:
    """``liveness 10s (default) · start-up 30m (default) · progress 40s (torchjob.io/progress-deadline-seconds)
    · other phases 5m (default)``."""
    # Late: the policies would cost every verb's start ~20 ms (cli/__init__.py); only `get` shows deadlines.
    from torchjob.core.policies.learned import LEARNING
    from torchjob.core.policies.progress import deadlines_in_force

    parts = []
    known = LearnedDeadlines.model_validate(learned) if learned else None
    for name, seconds, source in deadlines_in_force(annotations, known):
        shown = human_age(seconds) if seconds is not None else "not yet" if source.startswith(LEARNING) else "off"
        parts.append(f"{name} {shown} ({source})")
    return " · ".join(parts)


def _progress(trainer: dict[str, Any]) -> str:
    """``42% · ~1m left · step=420 totalSteps=1000 loss=0.31 (at 2026-11-24T01:00:00Z)``."""
    parts = []
    if trainer.get("progressPercentage") is not None:
        parts.append(f"{trainer['progressPercentage']}%")
    if trainer.get("estimatedRemainingSeconds") is not None:
        parts.append(f"~{human_age(trainer['estimatedRemainingSeconds'])} left")
    metrics = " ".join(f"{m.get('name')}={m.get('value')}" for m in trainer.get("metrics") or [])
    if metrics:
        parts.append(metrics)
    return " · ".join(parts) + (f" (at {trainer['lastUpdatedTime']})" if trainer.get("lastUpdatedTime") else "")
