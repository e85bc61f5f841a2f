"""The sharded example (examples/gpt): a GPT-style model under FSDP2 with DCP checkpoints, run as users run it
(``torchjob run``), in its tiny size: it learns, and a second job of another width resumes from its checkpoint."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import yaml

from tests.support.cli import run_cli
from tests.support.paths import ROOT

EXAMPLE = ROOT / "examples" / "gpt"


def _job(folder: Path, workers: int, *args: str) -> Path:
    folder.mkdir()
    for script in EXAMPLE.glob("*.py"):
        shutil.copy(script, folder / script.name)
    job = yaml.safe_load((EXAMPLE / "job.yaml").read_text())
    for spec in job["spec"]["pytorchReplicaSpecs"].values():
        spec["template"]["spec"]["containers"][0]["args"] = list(args)
    job["spec"]["pytorchReplicaSpecs"]["Worker"]["replicas"] = workers
    path = folder / "job.yaml"
    path.write_text(yaml.safe_dump(job))
    return path


def _metrics(home: Path) -> dict[str, Any]:
    found: dict[str, Any] = json.loads((home / "jobs" / "gpt" / "output" / "metrics.json").read_text())
    return found


def test_the_sharded_example_learns_and_resumes_on_another_width(tmp_path: Path) -> None:
    checkpoints = tmp_path / "checkpoints"
    common = ("--size", "tiny", "--checkpoint-dir", str(checkpoints), "--checkpoint-every", "40")
    first = _job(tmp_path / "four", 3, *common, "--steps", "80")
    result = run_cli("run", str(first), home=tmp_path / "home-4", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "[master-0] Rank 0: 0.1M parameters, sharded over 4 ranks (FSDP2)" in result.stdout
    learned = _metrics(tmp_path / "home-4")
    assert learned["world_size"] == 4 and learned["last_loss"] < learned["first_loss"] - 1.0, learned
    assert (checkpoints / "step-000000000080.json").exists()

    second = _job(tmp_path / "three", 2, *common, "--steps", "100")
    result = run_cli("run", str(second), home=tmp_path / "home-3", timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "resumed from the checkpoint of step 80 (saved by 4 ranks)" in result.stdout
    resumed = _metrics(tmp_path / "home-3")
    assert resumed["world_size"] == 3 and resumed["resumed_from"] == 80
    assert resumed["last_loss"] < learned["first_loss"] - 1.0, resumed
