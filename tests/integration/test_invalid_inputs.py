"""The corpus of invalid inputs in tests/data/invalid: each gets its one line, exit 2, and nothing starts.

Every file starts with ``# expect: TEXT``: some line on standard error must read ``torchjob: FILE: TEXT…``
(``{corpus}`` in TEXT stands for the corpus folder).
An optional ``# args: ...`` line gives more arguments (paths relative to the corpus folder). Both
``validate`` and ``run`` must refuse the file (``--local`` is given only to ``validate``: ``run`` always
checks what a local run needs), with no traceback, and must answer well within the timeout, however
hostile the file: a hang or a blow-up fails the test.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.cli import run_cli
from tests.support.corpus import INVALID_CORPUS, corpus_case

INVALID = sorted(INVALID_CORPUS.glob("*.yaml"))
# Generous: refusing takes a fraction of a second (see bench: python -m bench invalid); only a hang trips it.
TIMEOUT_SECONDS = 20


def test_the_corpus_is_large_enough() -> None:
    assert len(INVALID) >= 60


@pytest.mark.parametrize("path", INVALID, ids=[p.stem for p in INVALID])
def test_invalid_input_is_one_clear_line_and_exit_2(path: Path, torchjob_home: Path) -> None:
    expected, args = corpus_case(path)
    assert expected and not expected.startswith("#"), f"{path.name} names no expected line"
    for verb in ("validate", "run"):
        verb_args = [a for a in args if verb == "validate" or a != "--local"]
        result = run_cli(verb, str(path), *verb_args, home=torchjob_home, timeout=TIMEOUT_SECONDS)
        assert result.returncode == 2, (verb, result.stderr)
        assert "Traceback" not in result.stderr
        lines = result.stderr.splitlines()
        assert lines and all(line.startswith(f"torchjob: {path}: ") for line in lines), (verb, result.stderr)
        assert any(line.startswith(f"torchjob: {path}: {expected}") for line in lines), (verb, result.stderr)
    assert not (torchjob_home / "jobs").exists()  # nothing was created


def test_a_file_over_4_mib_is_refused_at_once(tmp_path: Path, torchjob_home: Path) -> None:
    huge = tmp_path / "huge.yaml"
    huge.write_text("# padding\n" * (450 * 1024))
    result = run_cli("validate", str(huge), home=torchjob_home, timeout=TIMEOUT_SECONDS)
    assert result.returncode == 2
    assert result.stderr.strip() == f"torchjob: {huge}: larger than 4 MiB; a job file is far smaller"


def test_a_device_or_folder_is_refused(tmp_path: Path, torchjob_home: Path) -> None:
    endless = run_cli("validate", "/dev/zero", home=torchjob_home, timeout=TIMEOUT_SECONDS)
    assert endless.returncode == 2 and "larger than 4 MiB" in endless.stderr
    folder = run_cli("run", str(tmp_path), home=torchjob_home, timeout=TIMEOUT_SECONDS)
    assert folder.returncode == 2 and "is a directory" in folder.stderr
