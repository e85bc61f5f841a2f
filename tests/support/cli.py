"""Running ``torchjob`` as a user would: its own process, against a private state directory."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def run_cli(*args: str, home: Path, timeout: float = 300, **kwargs: object) -> subprocess.CompletedProcess[str]:
    """Run ``torchjob ARGS`` as a user would, in its own process."""
    env = {**os.environ, "TORCHJOB_HOME": str(home)}
    return subprocess.run(  # type: ignore[call-overload,no-any-return]
        [sys.executable, "-m", "torchjob.cli.main", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=env,
        **kwargs,
    )
