"""Where things are in this checkout."""

from __future__ import annotations

from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "tests" / "data"
DEPLOY = ROOT / "deploy"
MNIST = ROOT / "examples" / "mnist"
GPT = ROOT / "examples" / "gpt"
TOOLS = ROOT / "tools"
TRAIN_SCRIPTS = ROOT / "tests" / "train" / "scripts"  # the worker-library tests' rank scripts
INTEGRATION_SCRIPTS = ROOT / "tests" / "integration" / "scripts"  # the test scripts jobs run, locally and in images
