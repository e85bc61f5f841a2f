"""Which replica commands start warm, and how (backends/local/warm_command.py)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from torchjob.backends.local.warm_command import warm_entry
from torchjob.launch.entry import ColdStart, WarmEntry

PYTHON = sys.executable
BIN = str(Path(PYTHON).parent)
INHERITED = {"PATH": f"{BIN}:/usr/bin:/bin"}


def entry(*command: str, env: dict[str, str] | None = None, cwd: str = "/tmp") -> WarmEntry | ColdStart:
    return warm_entry(list(command), env or {}, cwd, PYTHON, INHERITED)


def test_a_script_run_by_this_python_starts_warm_with_its_own_argv() -> None:
    assert entry("python", "train.py", "--epochs", "3") == WarmEntry(False, "train.py", ["train.py", "--epochs", "3"])
    assert entry(PYTHON, "-u", "train.py") == WarmEntry(False, "train.py", ["train.py"], unbuffered=True)


def test_a_module_starts_warm_as_python_dash_m_runs_it() -> None:
    assert entry("python", "-m", "pkg.train", "--lr", "0.1") == WarmEntry(
        True, "pkg.train", ["pkg.train", "--lr", "0.1"]
    )


def test_a_console_script_of_this_python_starts_warm() -> None:
    torchrun = os.path.join(BIN, "torchrun")
    if not os.path.exists(torchrun):
        pytest.skip("torchrun is installed with the train extra")
    found = entry("torchrun", "--nproc-per-node=2", "train.py")
    assert found == WarmEntry(False, torchrun, [torchrun, "--nproc-per-node=2", "train.py"])


@pytest.mark.parametrize(
    ("command", "why"),
    [
        (["sh", "-c", "python train.py"], "'sh' is not the Python torchjob runs in"),
        (["python", "-X", "dev", "train.py"], "the interpreter option -X changes how Python starts"),
        (["python", "-c", "print(1)"], "the interpreter option -c changes how Python starts"),
        (["python"], "the script comes from standard input"),
        (["no-such-program"], "'no-such-program' is not on the replica's PATH"),
    ],
)
def test_what_cannot_start_warm_starts_cold_and_says_why(command: list[str], why: str) -> None:
    found = entry(*command)
    assert isinstance(found, ColdStart) and why in found.reason


def test_a_python_variable_read_at_start_up_makes_it_cold_but_pythonpath_does_not() -> None:
    hashed = entry("python", "train.py", env={"PYTHONHASHSEED": "0"})
    assert isinstance(hashed, ColdStart) and "PYTHONHASHSEED" in hashed.reason
    assert isinstance(entry("python", "train.py", env={"PYTHONPATH": "/x", "PYTHONUNBUFFERED": "1"}), WarmEntry)


def test_another_interpreter_starts_cold(tmp_path: Path) -> None:
    other = tmp_path / "python"
    other.symlink_to(os.path.realpath(PYTHON))  # the same binary, another environment (its own site-packages)
    found = warm_entry(["python", "train.py"], {"PATH": str(tmp_path)}, "/tmp", PYTHON, {})
    assert isinstance(found, ColdStart)
