"""The operator's Prometheus metrics: what a scrape shows after passes with restarts, repairs and failures,
read back with prometheus_client's own parser."""

from __future__ import annotations

import json
import re
from datetime import timedelta

from prometheus_client.parser import text_string_to_metric_families

from tests.support.paths import ROOT
from tests.unit.test_planning import T0, at
from torchjob.controller.metrics import OperatorMetrics
from torchjob.core.actions import Cause, Event

JOB = ("team-a", "mnist")


def samples(metrics: OperatorMetrics) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = metrics.exposition().decode()
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            found[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return found


def test_restarts_and_repairs_are_counted_by_cause_and_timed_from_the_failure() -> None:
    metrics = OperatorMetrics(lambda: {"get": 7, "create": 3})
    metrics.passed(JOB, "Running", [], T0, 0.01)
    oom = Cause("worker-1 was OOMKilled (exit code 137)", "OOMKilled", T0)
    metrics.passed(JOB, "Restarting", [Event("Warning", "Restarting", "...", oom)], at(2), 0.02)
    metrics.passed(JOB, "Restarting", [], at(5), 0.01)
    metrics.passed(JOB, "Running", [], at(11), 0.01)  # the new group runs: recovered 11 s after the failure
    hung = Cause("worker-0 stopped responding (hung)", "Hung", at(20))
    metrics.passed(
        JOB, "Running", [Event("Warning", "Hung", "..."), Event("Warning", "Repaired", "...", hung)], at(50), 0.01
    )
    metrics.passed(
        ("team-a", "other"), "Failed", [Event("Warning", "Failed", "...", Cause("x", "ExitCode", at(1)))], at(1), 0.01
    )

    found = samples(metrics)
    assert found[("torchjob_job_restarts_total", (("cause", "OOMKilled"),))] == 1
    assert found[("torchjob_job_repairs_total", (("cause", "Hung"),))] == 1
    assert found[("torchjob_job_failures_total", (("cause", "ExitCode"),))] == 1
    assert found[("torchjob_failure_detection_seconds_count", ())] == 3
    assert found[("torchjob_failure_detection_seconds_sum", ())] == 2 + 30 + 0
    assert found[("torchjob_recovery_seconds_count", ())] == 1
    assert found[("torchjob_recovery_seconds_sum", ())] == 11
    assert found[("torchjob_recovery_seconds_bucket", (("le", "10.0"),))] == 0
    assert found[("torchjob_recovery_seconds_bucket", (("le", "20.0"),))] == 1
    assert found[("torchjob_reconcile_duration_seconds_count", ())] == 6
    assert found[("torchjob_jobs", (("state", "Running"),))] == 1
    assert found[("torchjob_jobs", (("state", "Failed"),))] == 1
    assert found[("torchjob_api_requests_total", (("verb", "get"),))] == 7

    metrics.forget(("team-a", "other"))
    metrics.failed_pass(TimeoutError())
    found = samples(metrics)
    assert ("torchjob_jobs", (("state", "Failed"),)) not in found
    assert found[("torchjob_reconcile_errors_total", (("error", "TimeoutError"),))] == 1


def test_a_restart_before_the_first_failure_is_known_still_counts_without_a_time() -> None:
    metrics = OperatorMetrics(dict)
    metrics.passed(JOB, "Restarting", [Event("Warning", "Restarting", "...", Cause("gone", "Vanished"))], T0, 0.0)
    metrics.passed(JOB, "Running", [], T0 + timedelta(seconds=3), 0.0)
    found = samples(metrics)
    assert found[("torchjob_job_restarts_total", (("cause", "Vanished"),))] == 1
    assert found[("torchjob_failure_detection_seconds_count", ())] == 0
    assert found[("torchjob_recovery_seconds_count", ())] == 0


def test_the_shipped_grafana_dashboard_asks_only_for_metrics_the_operator_exposes() -> None:
    metrics = OperatorMetrics(lambda: {"get": 1})
    metrics.passed(JOB, "Restarting", [Event("Warning", "Restarting", "...", Cause("x", "ExitCode", T0))], at(1), 0.0)
    metrics.passed(JOB, "Repairing", [Event("Warning", "Repaired", "...", Cause("x", "Hung", T0))], at(1), 0.0)
    metrics.passed(JOB, "Failed", [Event("Warning", "Failed", "...", Cause("x", "ExitCode", T0))], at(1), 0.0)
    metrics.passed(JOB, "Running", [], at(3), 0.0)
    metrics.failed_pass(TimeoutError())
    exposed = {name for name, _ in samples(metrics)}
    dashboard = json.loads((ROOT / "deploy" / "monitoring" / "grafana-dashboard.json").read_text())
    asked = {
        name
        for panel in dashboard["panels"]
        for target in panel["targets"]
        for name in re.findall(r"torchjob_[a-z_]+", target["expr"])
    }
    assert len(dashboard["panels"]) >= 8 and asked, dashboard
    assert asked <= exposed, asked - exposed
