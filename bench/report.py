"""``python -m bench report [--check]``: every published table made again from ``bench/results/`` alone.

The tables (``bench/tables/``) fill the blocks marked ``<!-- bench-table: NAME -->`` … ``<!-- /bench-table -->`` in
the README and the docs pages, and the whole of ``bench/RESULTS.md``. A row takes its numbers from the newest run
of its benchmark that measured every case it shows, so a row and its anchor always come from the same run, and it
names that run (date, commit). ``--check`` changes nothing and fails, naming the file, where a page differs from
what the records give: a number edited by hand, or a record added without the report made again.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from bench.records import RESULTS, ROOT, Record, load

RESULTS_PAGE = ROOT / "bench" / "RESULTS.md"
PAGES = (ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md")))
BLOCK = re.compile(r"(<!-- bench-table: (?P<name>[a-z0-9-]+) -->\n)(?P<body>.*?)(<!-- /bench-table -->)", re.DOTALL)


def _shown(value: float | None, spec: str, missing: str) -> str:
    """``value`` formatted by ``spec``, a number's format and, after a space, its unit (``.2f s`` → ``0.24 s``);
    ``missing`` alone (no unit) where there is no value."""
    number, _, unit = spec.partition(" ")
    if value is None:
        return missing
    return format(value, number) + (f" {unit}" if unit else "")


class Measured:
    """A case's record as a table shows it: ``{case:.2f s}`` is its median with its unit (``never`` when no trial
    got there), ``{case.samples:.2f}`` every sample, ``{case.n}`` the trials, ``{case.failed}`` those that never
    got there, ``{case.got}`` those that did."""

    def __init__(self, record: Record) -> None:
        self.record = record
        self.n = record.trials
        self.failed = record.failed
        self.text = record.text
        self.samples = Samples(record.samples)

    @property
    def value(self) -> float:
        if self.record.median is None:
            raise ValueError(f"{self.record.benchmark}/{self.record.case}: no trial got there")
        return self.record.median

    @property
    def ok(self) -> bool:
        return self.record.median is not None and not self.failed

    @property
    def got(self) -> int:
        return self.n - self.failed

    def __format__(self, spec: str) -> str:
        return _shown(self.record.median, spec, "never")


class Samples:
    def __init__(self, values: Sequence[float | None]) -> None:
        self.values = values

    def __format__(self, spec: str) -> str:
        return ", ".join(_shown(v, spec, "never") for v in self.values)


Cases = Mapping[str, Measured]


@dataclass(frozen=True)
class Row:
    """One published row: what is measured, torchjob's figure and the anchor's, each a template over the cases of
    one benchmark's run (``{case name:.2f}``; a case name may hold spaces), and the target with how it is judged."""

    metric: str
    benchmark: str
    ours: str
    anchor: str = ""
    target: str = ""
    met: Callable[[Cases], bool] | None = None
    # Figures worked out from the cases (a ratio, a difference of medians), shown as ``{name:.2f}``; the cases
    # they read are named in ``also``, so that the run chosen has them.
    derived: Mapping[str, Callable[[Cases], float]] = field(default_factory=dict)
    also: tuple[str, ...] = ()
    # torchjob's figure over the anchor's (a time: below 1 is faster), for tables with a ratio column
    ratio: Callable[[Cases], float] | None = None
    above: str = "torchjob slower"  # what a ratio above 1 says (a row of memory: it holds more, not slower)

    def cases(self) -> set[str]:
        fields = re.findall(r"\{([^{}]+)\}", self.ours + self.anchor)
        names = {match.split(".")[0].split(":")[0] for match in fields}
        return (names - set(self.derived)) | set(self.also)


@dataclass(frozen=True)
class Table:
    name: str
    title: str
    rows: tuple[Row, ...]
    columns: tuple[str, str] = ("torchjob", "anchor, the same run")
    judged: bool = True  # a target and met column
    ratios: bool = False  # a column of torchjob ÷ anchor, saying plainly where torchjob is slower (or holds more)
    notes: str = ""  # a line under the table (what the rows leave out)


@dataclass
class Shelf:
    """The records, newest run first for each benchmark."""

    records: list[Record]
    runs: dict[str, list[list[Record]]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        by_run: dict[tuple[str, str], list[Record]] = {}
        for record in self.records:
            by_run.setdefault((record.benchmark, record.run), []).append(record)
        for (benchmark, _), found in sorted(by_run.items(), key=lambda item: item[1][0].run.rsplit("-", 2)[-2]):
            self.runs.setdefault(benchmark, []).insert(0, found)

    def newest(self, benchmark: str, cases: Iterable[str]) -> list[Record] | None:
        wanted = set(cases)
        for run in self.runs.get(benchmark, []):
            if wanted <= {record.case for record in run}:
                return run
        return None


def _link(record: Record, page: Path) -> str:
    where = os.path.relpath(RESULTS / f"{record.benchmark}.jsonl", page.parent)
    dirty = "+" if record.dirty else ""
    label = f"{record.date}, {record.commit[:7]}{dirty}"
    # The docs site links only within docs/: there the record is named, not linked.
    return f"[{label}]({where})" if "docs" not in page.relative_to(ROOT).parts else f"{label}, `{record.benchmark}`"


def render_row(row: Row, shelf: Shelf, page: Path, table: Table) -> str:
    run = shelf.newest(row.benchmark, row.cases())
    if run is None:
        cells = [row.metric, "not measured yet", ""] + [""] * table.ratios + [row.target, ""] * table.judged
        return "| " + " | ".join([*cells, f"`python -m bench --only {row.benchmark}`"]) + " |"
    cases = {record.case: Measured(record) for record in run}
    values: dict[str, Measured | Figure] = _Values(cases)
    for name, work_out in row.derived.items():
        try:
            values[name] = Figure(work_out(cases))
        except ValueError:  # a case no trial reached
            values[name] = Figure(None)
    ours, anchor = row.ours.format_map(values), row.anchor.format_map(values)
    cells = [row.metric, ours, anchor]
    if table.ratios:
        cells.append(_ratio(row, cases))
    if table.judged:
        cells += [row.target, "" if row.met is None else ("yes" if _judge(row, cases) else "**no**")]
    return "| " + " | ".join([*cells, _link(run[0], page)]) + " |"


def _ratio(row: Row, cases: Cases) -> str:
    if row.ratio is None:
        return ""
    try:
        found = row.ratio(cases)
    except ValueError:  # a case no trial reached
        return "—"
    return f"{found:.2f}×" + (f": **{row.above}**" if found > 1 else "")


def _judge(row: Row, cases: Cases) -> bool:
    assert row.met is not None
    try:
        return row.met(cases)
    except ValueError:  # a case no trial reached
        return False


class Figure:
    """A derived figure: formatted as a number, or a dash where a case it needs was never reached."""

    def __init__(self, value: float | None) -> None:
        self.value = value

    def __format__(self, spec: str) -> str:
        return _shown(self.value, spec, "—")


class _Values(dict[str, "Measured | Figure"]):
    def __missing__(self, key: str) -> Measured | Figure:
        raise KeyError(f"no case {key!r} in this run (cases: {', '.join(sorted(self))})")


def render_table(table: Table, shelf: Shelf, page: Path) -> str:
    head = ["metric", *table.columns] + ["ratio"] * table.ratios + ["target", "met"] * table.judged + ["record"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += [render_row(row, shelf, page, table) for row in table.rows]
    return "\n".join(lines) + ("\n\n" + table.notes if table.notes else "") + "\n"


def results_page(tables: Sequence[Table], shelf: Shelf) -> str:
    parts = [
        "# Benchmark results",
        "",
        "Made by `python -m bench report` from the records in `bench/results/` (one JSON line per case: every "
        "sample, the commit, the machine, the versions); never edited by hand. `python -m bench` measures again "
        "(`--quick` for the headline rows, `--only NAME` for one benchmark). Each row names the run it comes from; "
        "a row's anchor was measured in that same run.",
        "",
    ]
    machines = sorted({_machine(record) for record in shelf.records})
    if machines:
        parts += ["Machines: " + "; ".join(machines) + ".", ""]
    for table in tables:
        parts += [f"## {table.title}", "", render_table(table, shelf, RESULTS_PAGE)]
    return "\n".join(parts)


def _machine(record: Record) -> str:
    m = record.machine
    return f"{m.get('cores')} cores, {m.get('memory_gib')} GiB, {m.get('cpu')}, kernel {m.get('kernel')}"


def fill(text: str, tables: Mapping[str, Table], shelf: Shelf, page: Path) -> str:
    def replaced(match: re.Match[str]) -> str:
        name = match["name"]
        if name not in tables:
            raise KeyError(f"{page.relative_to(ROOT)}: no table named {name!r} in bench/tables/")
        return match.group(1) + render_table(tables[name], shelf, page) + match.group(4)

    return BLOCK.sub(replaced, text)


def outputs(shelf: Shelf) -> dict[Path, str]:
    """Every file the report writes, with the text it should hold."""
    from bench.tables import TABLES

    by_name = {table.name: table for table in TABLES}
    found = {RESULTS_PAGE: results_page(TABLES, shelf)}
    for page in PAGES:
        text = page.read_text()
        if BLOCK.search(text):
            found[page] = fill(text, by_name, shelf, page)
    return found


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="python -m bench report", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; fail where a page is out of date")
    args = parser.parse_args(argv)
    try:
        shelf = Shelf(load())
        wanted = outputs(shelf)
    except (KeyError, ValueError) as err:
        print(f"bench report: {err.args[0] if err.args else err}", file=sys.stderr)
        return 2
    stale = [path for path, text in wanted.items() if not path.exists() or path.read_text() != text]
    if args.check:
        for path in stale:
            print(
                f"bench report: {path.relative_to(ROOT)} differs from what bench/results/ gives: "
                "run `python -m bench report` (never edit a bench table by hand)",
                file=sys.stderr,
            )
        return 1 if stale else 0
    # The plots are made here, never checked: their bytes depend on matplotlib's version, the tables' do not.
    from bench import plots

    drawn = plots.outputs(shelf)
    stale += [path for path, text in drawn.items() if not path.exists() or path.read_text() != text]
    for path in stale:
        path.write_text({**wanted, **drawn}[path])
        print(f"bench report: wrote {path.relative_to(ROOT)}")
    return 0
