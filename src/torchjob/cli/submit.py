"""``torchjob submit FILE [-n NS] [--follow]``: create a PyTorchJob on the cluster, optionally follow it.

The file is validated here first (the same one-line errors as ``torchjob run``), then sent as written, so
``kubectl get pytorchjob -o yaml`` shows the user's own spec. With ``--follow`` every replica's output is
streamed, prefixed by replica, until the job ends, under a progress bar on a terminal (``cli/progress.py``);
the exit code is then the job's, as for ``run``.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import TYPE_CHECKING

from torchjob.api.types import JobStatus
from torchjob.cli.common import add_runtime_option, add_target_options, cluster_client, print_notes
from torchjob.cli.progress import FollowDisplay
from torchjob.sdk.errors import JobNotFoundError, SdkError

if TYPE_CHECKING:
    from torchjob.sdk.cluster_client import ClusterClient

# How long --follow waits for the operator to create the PyTorchJob a submitted TrainJob or ElasticJob runs as.
_OWNED_RUN_SECONDS = 60.0
_GROUPS = {"TrainJob": "trainer.kubeflow.org", "ElasticJob": "elastic.pytorch.org"}


def add_parser(verbs: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = verbs.add_parser("submit", help="create a PyTorchJob on the Kubernetes cluster")
    p.add_argument("file", help="the PyTorchJob YAML file (may hold Jinja2 placeholders, see --values), or -")
    p.add_argument("--values", metavar="FILE.json", help="values for the file's Jinja2 placeholders")
    add_runtime_option(p)
    p.add_argument("-f", "--follow", action="store_true", help="stream the replicas' output until the job ends")
    add_target_options(p, cluster_only=True)
    p.set_defaults(handler=handle)


def handle(args: argparse.Namespace) -> int:
    from torchjob.api.loading import load_job  # a job file's models: 30 ms (cli/__init__.py)

    loaded = load_job(args.file, args.values, args.runtime)  # one-line errors before anything reaches the cluster
    print_notes(loaded.notes)
    job = loaded.job
    c = cluster_client(args)
    kind = loaded.kind
    created_as_written = loaded.written is not None and c.submit_as_written(kind, loaded.written)
    if created_as_written:
        print(f"{kind.lower()}.{_GROUPS[kind]}/{job.name} created in namespace {c.namespace}", file=sys.stderr)
    else:
        c.submit(loaded.document)
        lowered = f" (the {kind}, run as a PyTorchJob: this cluster serves no {kind}s)" if loaded.written else ""
        print(f"pytorchjob.kubeflow.org/{job.name} created in namespace {c.namespace}{lowered}", file=sys.stderr)
    if not args.follow:
        return 0
    if created_as_written:
        _wait_for_its_pytorchjob(c, kind, job.name)

    def status() -> JobStatus:
        return JobStatus.model_validate(c.get_wire(job.name).get("status") or {})

    try:
        with FollowDisplay(job.name, status) as shown:
            for replica, line in c.follow(job.name):
                shown.line(replica, line)
    except KeyboardInterrupt:
        print(f"torchjob: stopped following; the job goes on (torchjob delete --cluster {job.name})", file=sys.stderr)
        return 130
    conditions = (c.get_wire(job.name).get("status") or {}).get("conditions") or []
    last = conditions[-1] if conditions else {}
    print(f"torchjob: {job.name} {last.get('type', '')}: {last.get('message', '')}", file=sys.stderr)
    return 0 if last.get("type") == "Succeeded" else 1


def _wait_for_its_pytorchjob(c: ClusterClient, kind: str, name: str) -> None:
    """The operator creates the PyTorchJob a TrainJob or an ElasticJob runs as within a pass; following reads that
    job."""
    deadline = time.monotonic() + _OWNED_RUN_SECONDS
    while True:
        try:
            c.get_wire(name)
            return
        except JobNotFoundError:
            if time.monotonic() > deadline:
                raise SdkError(
                    f"{kind.lower()} {name}: no PyTorchJob runs it after {_OWNED_RUN_SECONDS:.0f} s; is the torchjob "
                    f"operator running? (kubectl get {kind.lower()} {name} -o yaml shows its conditions)"
                ) from None
            time.sleep(0.5)
