"""A Kubeflow Pipelines (v2) step that runs a PyTorchJob and returns how it ended.

``run_pytorchjob`` is a lightweight KFP component (``kfp`` SDK, the ``pipelines`` extra): give it the job's
YAML; it runs the job with torchjob (locally, the default: the replicas are processes of the step's own
container; or on the cluster with ``cluster=True``, through the torchjob operator, following it), waits
for the end, and returns its state, attempts, restarts and last message. The job's reported training metrics
(``status.trainerStatus``: step, loss, samples/s...) go to the step's ``Metrics`` artifact. A job that did
not succeed fails the step (``fail_on_failure=False`` returns its state instead). The job's relative paths
are taken from ``working_dir`` (default: the step's working directory), as if its YAML were there.

    from kfp import dsl
    from torchjob.pipelines import run_pytorchjob

    @dsl.pipeline
    def train(job_yaml: str) -> str:
        return run_pytorchjob(job_yaml=job_yaml).outputs["state"]

KFP runs the function's source on its own, so everything it needs is imported inside it.
"""

# No ``from __future__ import annotations``: KFP reads the component's annotations as real types.
from typing import NamedTuple

from kfp import dsl

# The image a cluster runs the step in: any with torchjob[pipelines] installed (and, for cluster=True, a
# service account that may create and read PyTorchJobs).
BASE_IMAGE = "ghcr.io/torchjob/torchjob:0.1.0"


# The image already has kfp (torchjob[pipelines]): nothing is pip-installed when the step starts.
@dsl.component(base_image=BASE_IMAGE, install_kfp_package=False)
def run_pytorchjob(
    job_yaml: str,
    metrics: dsl.Output[dsl.Metrics],
    cluster: bool = False,
    namespace: str = "",
    working_dir: str = "",
    fail_on_failure: bool = True,
) -> NamedTuple("JobOutcome", [("state", str), ("attempts", int), ("restarts", int), ("message", str)]):  # type: ignore[valid-type]
    """Run the PyTorchJob ``job_yaml`` to its end and return how it ended (see the module's doc)."""
    import json
    import os
    import subprocess
    import sys
    import tempfile
    from collections import namedtuple
    from pathlib import Path

    import yaml

    name = (yaml.safe_load(job_yaml).get("metadata") or {}).get("name", "")
    where = ["--cluster", *(["-n", namespace] if namespace else [])] if cluster else []
    # Written beside the step's working directory: the job's relative paths (its command, workingDir) mean
    # there what they mean beside the YAML a user runs.
    folder = Path(working_dir or os.getcwd())
    with tempfile.NamedTemporaryFile("w", dir=folder, prefix=".torchjob-step-", suffix=".yaml") as written:
        written.write(job_yaml)
        written.flush()
        verb = ["submit", written.name, "--follow", *where[1:]] if cluster else ["run", written.name, "--replace"]
        ran = subprocess.run([sys.executable, "-m", "torchjob.cli.main", *verb], check=False)
    if ran.returncode not in (0, 1):  # 0: Succeeded, 1: Failed; anything else: torchjob did not run it
        raise RuntimeError(f"torchjob could not run the job (exit code {ran.returncode}); see the step's log")
    shown = subprocess.run(
        [sys.executable, "-m", "torchjob.cli.main", "get", name, "-o", "json", *where],
        check=True,
        capture_output=True,
        text=True,
    )
    status = json.loads(shown.stdout).get("status") or {}
    conditions = status.get("conditions") or [{}]
    state, message = conditions[-1].get("type", ""), conditions[-1].get("message", "")
    trainer = status.get("trainerStatus") or {}
    for metric in trainer.get("metrics") or []:
        try:
            metrics.log_metric(metric["name"], float(metric["value"]))
        except (KeyError, TypeError, ValueError):
            continue  # a metric that is not a number has no place in a Metrics artifact
    if trainer.get("progressPercentage") is not None:
        metrics.log_metric("progressPercentage", float(trainer["progressPercentage"]))
    if fail_on_failure and state != "Succeeded":
        raise RuntimeError(f"PyTorchJob {name} ended {state}: {message}")
    job_outcome = namedtuple("job_outcome", ["state", "attempts", "restarts", "message"])
    return job_outcome(state, int(status.get("attempt", 0)) + 1, int(status.get("restartCount", 0)), message)
