"""What the ``torchjob`` command imports before it knows its verb: only what every verb needs.

The verbs' handlers import the rest themselves (``torchjob/cli/__init__.py`` says why); these tests fail when a
top-level import brings one of those back into every start (``bench.cli`` measures the time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

# Each would cost every verb's start: the Kubernetes client (0.2 s), the operator, torch (1 s), the
# dashboard's server, plotting, templating, YAML and a job file's models (30 ms), the planner and the
# local controller.
ONLY_FOR_SOME_VERBS = (
    "torch",
    "lightkube",
    "httpx",
    "uvicorn",
    "starlette",
    "matplotlib",
    "jinja2",
    "yaml",
    "torchjob.api.loading",
    "torchjob.core.planning",
    "torchjob.controller.local_driver",
    "torchjob.controller.operator",
    "torchjob.backends.kubernetes.cluster",
    "torchjob.ui.app",
)


def _loaded_after(statement: str) -> set[str]:
    probe = f"import json, sys; {statement}; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    return set(json.loads(out.stdout))


def test_the_command_starts_without_what_only_some_verbs_need() -> None:
    loaded = _loaded_after("import torchjob.cli.main; torchjob.cli.main.build_parser()")
    assert "torchjob.cli.run" in loaded  # the probe really imported the verbs
    assert sorted(loaded.intersection(ONLY_FOR_SOME_VERBS)) == []


def test_a_verb_imports_what_it_needs_when_it_runs(tmp_path: Path) -> None:
    # `torchjob validate` reads a job file: its handler brings the models in (so the list above is not vacuous).
    statement = (
        "import torchjob.cli.main as m, contextlib, io; "
        "contextlib.redirect_stderr(io.StringIO()).__enter__(); "
        f"m.main(['validate', '{tmp_path}/missing.yaml'])"
    )
    loaded = _loaded_after(statement)
    assert "torchjob.api.loading" in loaded
    assert "yaml" in loaded
