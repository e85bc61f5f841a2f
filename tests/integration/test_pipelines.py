"""The Kubeflow Pipelines step (torchjob.pipelines.run_pytorchjob) run by the KFP SDK's own local runner: the
component's function executes as KFP runs it (its source alone, in a subprocess), and runs a real job on the
local backend."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from kfp import local

from tests.support.paths import INTEGRATION_SCRIPTS
from torchjob.pipelines import run_pytorchjob
from torchjob.testing import make_job

# The local runner warns that the component names a container image; here it runs in this environment.
pytestmark = pytest.mark.filterwarnings("ignore:You may be attemping to run a task:RuntimeWarning")


@pytest.fixture
def kfp_local(tmp_path: Path, torchjob_home: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)  # the step's working directory: the job's relative paths start here
    local.init(runner=local.SubprocessRunner(use_venv=False), pipeline_root=str(tmp_path / "pipeline-root"))
    return tmp_path


def test_the_step_runs_the_job_and_returns_its_outcome_and_metrics(kfp_local: Path) -> None:
    (kfp_local / "train.py").write_text((INTEGRATION_SCRIPTS / "hang_train.py").read_text())
    job = make_job("piped").master().workers(1).command("python", "train.py", "--steps", "20")  # relative path
    task = run_pytorchjob(job_yaml=yaml.safe_dump(job.wire()))
    assert task.outputs["state"] == "Succeeded"
    assert (task.outputs["attempts"], task.outputs["restarts"]) == (1, 0)
    assert "successfully completed" in task.outputs["message"]
    reported = task.outputs["metrics"].metadata
    assert reported["step"] == 20 and reported["totalSteps"] == 20 and reported["progressPercentage"] == 100
    assert "loss" in reported


def test_a_failed_job_fails_the_step_unless_asked_to_return_it(kfp_local: Path) -> None:
    failing = (
        make_job("broken")
        .workers(1)
        .command("python", str(INTEGRATION_SCRIPTS / "worker.py"), "--act", "worker-0:*:exit:3")
        .restart_policy("Never")
    )
    with pytest.raises(RuntimeError, match="FAILURE"):
        run_pytorchjob(job_yaml=yaml.safe_dump(failing.wire()))
    task = run_pytorchjob(job_yaml=yaml.safe_dump(failing.wire()), fail_on_failure=False)
    assert task.outputs["state"] == "Failed"
    assert "worker-0 exited with code 3" in task.outputs["message"]
