"""The benchmark records and the tables made from them (bench/records.py, bench/report.py): a row shows the newest
run that measured all its cases, torchjob and anchor from that one run, named by date and commit; a page whose
numbers differ from what the records give is found stale."""

from __future__ import annotations

import datetime
import json
from pathlib import Path

import pytest
from bench import report
from bench.records import Run, load
from bench.report import Row, Shelf, Table


def _run(benchmark: str, hour: int, samples: dict[str, list[float | None]], directory: Path) -> Run:
    run = Run(benchmark, started=datetime.datetime(2026, 11, 27, hour, tzinfo=datetime.timezone.utc))
    for case, values in samples.items():
        run.add(case, values)
    run.save(directory)
    return run


TABLE = Table(
    "demo",
    "Demo",
    (
        Row(
            "kill → first step",
            "kill",
            "**{in place:.2f s}**",
            "{restart:.1f s} ({restart.failed} of {restart.n} never)",
            "≤ 0.5 s",
            lambda cases: cases["in place"].value <= 0.5,
            ratio=lambda cases: cases["in place"].value / cases["restart"].value,
        ),
    ),
    ratios=True,
)


def test_a_record_keeps_every_sample_the_median_and_what_it_stands_on(tmp_path: Path) -> None:
    _run("kill", 10, {"in place": [0.3, 0.2, 0.4, None]}, tmp_path)
    line = json.loads((tmp_path / "kill.jsonl").read_text().splitlines()[0])
    assert line["samples"] == [0.3, 0.2, 0.4, None]
    assert (line["median"], line["trials"], line["failed"]) == (0.3, 4, 1)
    assert line["run"].startswith("kill-20261127T100000Z-") and line["date"] == "2026-11-27"
    assert {"cores", "memory_gib", "kernel", "cpu"} <= set(line["machine"])
    assert "torch" in line["versions"] and isinstance(line["dirty"], bool) and line["commit"]


def test_a_row_takes_both_sides_from_the_newest_run_that_measured_them(tmp_path: Path) -> None:
    _run("kill", 9, {"in place": [0.9], "restart": [9.0]}, tmp_path)
    _run("kill", 10, {"in place": [0.2, 0.3, 0.25], "restart": [2.0, None, 4.0]}, tmp_path)
    _run("kill", 11, {"in place": [0.1]}, tmp_path)  # newer, but without the anchor: not this row's run
    page = report.ROOT / "bench" / "RESULTS.md"
    rendered = report.render_table(TABLE, Shelf(load(tmp_path)), page)
    row = rendered.splitlines()[2]
    assert "**0.25 s**" in row and "3.0 s (1 of 3 never)" in row
    assert "| 0.08× |" in row and "| yes |" in row
    assert "[2026-11-27, " in row and "](results/kill.jsonl)" in row


def test_a_slower_torchjob_and_a_missed_target_are_said_plainly(tmp_path: Path) -> None:
    _run("kill", 10, {"in place": [3.0], "restart": [2.0]}, tmp_path)
    row = report.render_table(TABLE, Shelf(load(tmp_path)), report.ROOT / "README.md").splitlines()[2]
    assert "1.50×: **torchjob slower**" in row and "| **no** |" in row


def test_a_case_no_trial_reached_reads_never_and_fails_its_target(tmp_path: Path) -> None:
    _run("kill", 10, {"in place": [None, None], "restart": [2.0]}, tmp_path)
    row = report.render_table(TABLE, Shelf(load(tmp_path)), report.ROOT / "README.md").splitlines()[2]
    assert "**never**" in row and "| — |" in row and "| **no** |" in row


def test_a_row_with_no_record_says_how_to_measure_it(tmp_path: Path) -> None:
    row = report.render_table(TABLE, Shelf([]), report.ROOT / "README.md").splitlines()[2]
    assert "not measured yet" in row and "`python -m bench --only kill`" in row


def test_only_the_marked_block_is_made_again_and_an_edited_number_reads_stale(tmp_path: Path) -> None:
    _run("kill", 10, {"in place": [0.2], "restart": [2.0]}, tmp_path)
    shelf = Shelf(load(tmp_path))
    page = report.ROOT / "docs" / "benchmarks" / "index.md"
    text = "intro\n<!-- bench-table: demo -->\nold\n<!-- /bench-table -->\nafter\n"
    filled = report.fill(text, {"demo": TABLE}, shelf, page)
    assert filled.startswith("intro\n<!-- bench-table: demo -->\n| metric |") and filled.endswith("after\n")
    assert "`kill`" in filled and "](" not in filled.split("| kill → first step |")[1]  # docs name, not link
    assert report.fill(filled, {"demo": TABLE}, shelf, page) == filled
    edited = filled.replace("**0.20 s**", "**0.10 s**")
    assert report.fill(edited, {"demo": TABLE}, shelf, page) != edited
    with pytest.raises(KeyError, match="no table named 'other'"):
        report.fill("<!-- bench-table: other -->\n<!-- /bench-table -->", {}, shelf, page)


def test_a_case_name_that_a_table_could_not_name_is_refused() -> None:
    with pytest.raises(ValueError, match="format field"):
        Run("kill").keep("kill: first step", 1.0)


def test_a_damaged_record_names_its_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "kill.jsonl").write_text('{"benchmark": "kill"}\n')
    with pytest.raises(ValueError, match=r"kill\.jsonl:1: not a benchmark record"):
        load(tmp_path)


def test_the_published_pages_match_the_kept_records() -> None:
    """What `tools/check` runs: every table in the README, the docs and RESULTS.md is the records' own."""
    stale = [path for path, text in report.outputs(Shelf(load())).items() if path.read_text() != text]
    assert not stale, f"run `python -m bench report`: {stale}"


def test_every_published_row_names_a_registered_benchmark_and_its_cases() -> None:
    from bench.registry import BY_NAME
    from bench.tables import TABLES

    for table in TABLES:
        for row in table.rows:
            assert row.benchmark in BY_NAME, row.metric
            assert row.cases(), row.metric


def test_a_tree_changed_only_in_its_records_is_clean(monkeypatch: pytest.MonkeyPatch) -> None:
    """The records a run writes never make the next record dirty, whatever line of git's status they are on."""
    from bench import records

    status = " M bench/results/hang.jsonl\n?? bench/results/launch.jsonl\n"
    monkeypatch.setattr(records, "_git", lambda *args: status if args[0] == "status" else "abc1234567\n")
    assert records.commit() == ("abc1234567", False)
    status = " M bench/results/hang.jsonl\n M src/torchjob/core/planning.py\n"
    assert records.commit() == ("abc1234567", True)
