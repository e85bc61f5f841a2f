"""The figures and verdicts the tables' rows share: a kill's cost to the whole job, a ratio of torchjob's figure
over the anchor's, a limit, every trial a success."""

from __future__ import annotations

from collections.abc import Callable

from bench.report import Cases

KUBEFLOW = "Kubeflow's training-operator v1.8.1"
Figure = Callable[[Cases], float]


def added(way: str) -> Figure:
    """What a kill adds to the whole job: the median job killed less the median job clean, of the same run."""
    return lambda cases: cases[f"{way} job killed"].value - cases[f"{way} job clean"].value


def over(ours: str | Figure, anchor: str | Figure) -> Figure:
    """torchjob's figure over the anchor's: a case's median, or a figure worked out."""

    def value(found: str | Figure, cases: Cases) -> float:
        return cases[found].value if isinstance(found, str) else found(cases)

    return lambda cases: value(ours, cases) / value(anchor, cases)


def at_most(case: str, limit: float) -> Callable[[Cases], bool]:
    return lambda cases: cases[case].ok and cases[case].value <= limit


def all_of(case: str) -> Callable[[Cases], bool]:
    """Every trial of a 1-or-0 case was a 1 (every run Succeeded, no false alarm)."""
    return lambda cases: (
        cases[case].ok and cases[case].value == 1 and cases[case].samples.values.count(1) == cases[case].n
    )
