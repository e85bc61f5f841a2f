"""Hang deadlines learned from the job's own steps, so that nobody has to tune them.

A fixed progress deadline is wrong for nearly every job: too long to find a deadlock in a job of 10 ms steps,
too short for one of 10-minute steps, and a slow start under load looks like a hang to it. Each process's
reporter measures the longest wall time between two of its optimizer steps (an epoch boundary's data loading
included; time in named phases such as a checkpoint save left out, ``torchjob.sections``). Once a process has
seen ``WARMUP_GAPS`` gaps, the progress deadline is ``SAFETY_FACTOR`` times the longest gap any process has
seen, and never less than ``PROGRESS_FLOOR`` (a busy machine stalls everything for a few seconds at times). A
named phase (a checkpoint save or load, an evaluation) has an allowance of its own: ``SAFETY_FACTOR`` times
its longest completed run, never less than ``SECTION_FLOOR``. Learned values only grow, and are kept in
``status.learnedDeadlines``: a restarted attempt, or a new operator, starts with them.

An annotation always wins: ``torchjob.io/progress-deadline-seconds`` for steps and
``torchjob.io/section-deadline-seconds`` for every phase.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from torchjob.api import extensions
from torchjob.api.types import LearnedDeadlines, PyTorchJob
from torchjob.core.observed import ReplicaObservation

WARMUP_GAPS = 10
SAFETY_FACTOR = 5.0
PROGRESS_FLOOR = 20.0
SECTION_FLOOR = 300.0
# The longest gap is written again only when it grew by more than this: a status write per pass would be churn.
_GROWTH_WORTH_WRITING = 1.1

LEARNED = "learned"
LEARNING = "learning"
OFF = "off"


def learn(previous: LearnedDeadlines | None, current: Sequence[ReplicaObservation]) -> LearnedDeadlines | None:
    """The learned deadlines after this pass's reports: ``previous`` itself when nothing grew."""
    reports = [o.progress for o in current if o.progress is not None]
    gaps = [p.longest_gap for p in reports if p.longest_gap is not None and p.gaps_seen >= WARMUP_GAPS]
    known = previous or LearnedDeadlines()
    longest = known.longest_step_gap_seconds
    if gaps and (longest is None or max(gaps) > longest * _GROWTH_WORTH_WRITING):
        longest = round(max(gaps), 3)
    progress_seconds = known.progress_seconds
    if longest is not None:
        progress_seconds = max(progress_seconds or 0, _allowance(longest, PROGRESS_FLOOR))
    sections = dict(known.section_seconds)
    for report in reports:
        for name, seconds in report.sections_longest.items():
            sections[name] = max(sections.get(name, 0), _allowance(seconds, SECTION_FLOOR))
    learned = LearnedDeadlines(
        progress_seconds=progress_seconds, longest_step_gap_seconds=longest, section_seconds=sections
    )
    if learned == known:
        return previous
    return learned


def _allowance(longest: float, floor: float) -> int:
    return math.ceil(max(floor, SAFETY_FACTOR * longest))


def progress_deadline(annotations: Mapping[str, str], learned: LearnedDeadlines | None) -> tuple[float | None, str]:
    """The progress deadline in force for a job with these annotations and learned deadlines, and where it came
    from: the annotation, ``LEARNED``, or None while the job is still ``LEARNING`` (no process has warmed up)
    or the annotation turned it ``OFF`` (``"0"``: no progress deadline, as for the liveness deadline)."""
    value = annotations.get(extensions.PROGRESS_DEADLINE)
    if value:
        return (float(value), extensions.PROGRESS_DEADLINE) if float(value) > 0 else (None, OFF)
    if learned is not None and learned.progress_seconds is not None:
        return float(learned.progress_seconds), LEARNED
    return None, LEARNING


def section_allowance(job: PyTorchJob, learned: LearnedDeadlines | None, name: str) -> float:
    """How long a process may stay in the named phase without a step."""
    value = job.annotation(extensions.SECTION_DEADLINE)
    if value:
        return float(value)
    learned_seconds = learned.section_seconds.get(name) if learned is not None else None
    return float(learned_seconds) if learned_seconds is not None else SECTION_FLOOR
