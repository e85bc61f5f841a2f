"""A member of an in-place group on notice of eviction (SIGTERM) trains on until a spare takes its place,
and no longer than that: real processes, real signals, the main thread blocked in a long call."""

from __future__ import annotations

import signal
import subprocess
import sys

import pytest

from tests.support.paths import INTEGRATION_SCRIPTS

PROBE = INTEGRATION_SCRIPTS / "eviction_probe.py"


def noticed(mode: str) -> tuple[int, str]:
    """Start the probe, SIGTERM it once its hold is in place, and return its exit code and output."""
    probe = subprocess.Popen([sys.executable, str(PROBE), mode], stdout=subprocess.PIPE, text=True)
    assert probe.stdout is not None
    first = probe.stdout.readline()
    probe.send_signal(signal.SIGTERM)
    rest, _ = probe.communicate(timeout=60)
    return probe.returncode, first + rest


def test_with_no_spare_taking_its_place_it_leaves_as_preempted_after_the_hold() -> None:
    code, output = noticed("plain")
    assert code == 143 and "active True" in output and "noted" in output
    assert "leaving on SIGTERM: no spare took its place within 5s" in output and "trained on" not in output


def test_it_holds_past_the_usual_hold_until_a_controller_that_tells_has_looked_at_the_notice() -> None:
    """The operator under load: it looks at the notice after 7 s and hands nothing over (the member leaves
    then, not at 5 s), or publishes the handover after 6.5 s (the member trains on)."""
    code, output = noticed("late")
    assert code == 143 and "leaving on SIGTERM: no spare took its place within 5s" in output, output
    assert "trained on" not in output
    code, output = noticed("late-handover")
    assert code == 0 and "trained on" in output and "leaving" not in output, output


def test_once_a_newer_membership_is_published_it_trains_on_and_the_group_decides() -> None:
    code, output = noticed("handover")
    assert code == 0 and "trained on" in output and "leaving" not in output


@pytest.mark.parametrize(("mode", "code", "said"), [("own", 7, "active False"), ("repairing", 143, "repairing")])
def test_a_script_with_its_own_handler_keeps_it_and_a_repairing_member_goes_at_once(
    mode: str, code: int, said: str
) -> None:
    exited, output = noticed(mode)
    assert exited == code and said in output and "trained on" not in output
