"""Running ``torchjob`` as a user would: its own process, against a private state directory or a cluster."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kuberig import Cluster


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


def run_cli_on_cluster(
    cluster: Cluster, *args: str, timeout: float = 120, home: Path | None = None
) -> subprocess.CompletedProcess[str]:
    """Run ``torchjob ARGS`` against ``cluster`` (its kubeconfig), with ``home`` for its local state directory, or
    none to fall back on."""
    return subprocess.run(
        [sys.executable, "-m", "torchjob.cli.main", *args],
        env={**cluster.env(), "TORCHJOB_HOME": str(home or "/nonexistent-local-home")},
        capture_output=True,
        text=True,
        timeout=timeout,
    )
