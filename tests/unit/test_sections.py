"""What a process reports for hang detection to learn from: the longest gap between its steps, with the time
spent in named phases (a checkpoint save, an evaluation) left out, and the phase it is in."""

from __future__ import annotations

import time

from torchjob import sections, worker_files


def test_a_phase_is_reported_while_it_runs_and_kept_out_of_the_step_gaps() -> None:
    gaps = sections.StepGaps()
    assert gaps.report_fields() == {}  # no gap before a second step
    gaps.on_step()
    with sections.section("evaluation"):
        inside = sections.report_fields()[worker_files.REPORT_SECTION]
        with sections.section("inner"):  # phases do not nest: the inner one is part of the outer one
            time.sleep(0.3)
        assert sections.report_fields()[worker_files.REPORT_SECTION]["name"] == "evaluation"
    gaps.on_step()
    assert inside["name"] == "evaluation" and inside["elapsed"] >= 0
    fields = sections.report_fields()
    assert worker_files.REPORT_SECTION not in fields
    assert fields[worker_files.REPORT_SECTIONS_LONGEST]["evaluation"] >= 0.3
    assert "inner" not in fields[worker_files.REPORT_SECTIONS_LONGEST]
    reported = gaps.report_fields()
    assert reported[worker_files.REPORT_GAPS_SEEN] == 1
    assert reported[worker_files.REPORT_LONGEST_GAP] < 0.2  # the 0.3 s in the phase does not count
    time.sleep(0.25)
    gaps.on_step()
    assert gaps.report_fields()[worker_files.REPORT_LONGEST_GAP] >= 0.25
