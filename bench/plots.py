"""The plots the benchmark pages show, made from the records as the tables are (``python -m bench report``).

One so far: how repair's cost grows with the group (``bench.width``), an SVG beside its page. SVG keeps it text
in git, and a fixed hash salt and no date keep it byte-for-byte the same for the same records.
"""

from __future__ import annotations

from pathlib import Path

from bench.records import ROOT
from bench.report import Shelf

WIDTH_PLOT = ROOT / "docs" / "benchmarks" / "width.svg"
_WIDTH_LINES = (
    ("in place first step at {n}", "torchjob in place: the full group back", "C0", "o-"),
    ("elastic in place first step at {n}", "torchjob elastic in place: its survivors' next step", "C4", "D-"),
    ("elastic in place whole at {n}", "torchjob elastic in place: the full group back", "C5", "P-"),
    ("warm restart first step at {n}", "torchjob warm group restart", "C1", "s-"),
    ("torchft replacement at {n}", "torchft 0.2.0: its replacement's first step", "C3", "^--"),
    ("torchft survivors in a new quorum at {n}", "torchft 0.2.0: its survivors' next step without it", "C2", "v--"),
)


def width(shelf: Shelf) -> str | None:
    """The SVG of seconds from the kill against the ranks, from the newest ``width`` run (None: no run yet)."""
    widths = (3, 8, 16, 32)
    cases = [template.format(n=n) for template, *_ in _WIDTH_LINES for n in widths]
    run = shelf.newest("width", cases)
    if run is None:
        return None
    import io

    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.hashsalt"] = "torchjob"
    from matplotlib import pyplot

    by_case = {record.case: record for record in run}
    figure, axes = pyplot.subplots(figsize=(7, 4.6))
    for template, label, color, style in _WIDTH_LINES:
        points = [(n, by_case[template.format(n=n)].median) for n in widths]
        shown = [(n, value) for n, value in points if value is not None]
        axes.plot([n for n, _ in shown], [v for _, v in shown], style, color=color, label=label)
    axes.set_xscale("log", base=2)
    axes.set_yscale("log")
    axes.set_xticks(widths, [str(n) for n in widths])
    axes.set_xlabel("ranks (one process each, on 2 cores)")
    axes.set_ylabel("seconds after the SIGKILL (median of 3)")
    first = run[0]
    axes.set_title(f"A rank SIGKILLed, by group width ({first.date}, {first.commit[:7]})", fontsize=10)
    axes.grid(True, which="both", alpha=0.3)
    axes.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.17), ncol=2, frameon=False)
    figure.tight_layout()
    out = io.StringIO()
    figure.savefig(out, format="svg", metadata={"Date": None})
    pyplot.close(figure)
    return out.getvalue()


def outputs(shelf: Shelf) -> dict[Path, str]:
    """Every plot with the text it should hold."""
    found = {}
    svg = width(shelf)
    if svg is not None:
        found[WIDTH_PLOT] = svg
    return found
